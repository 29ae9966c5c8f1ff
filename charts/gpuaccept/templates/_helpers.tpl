{{/* Chart name, truncated to a DNS label. */}}
{{- define "gpuaccept.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; the release name alone when it already contains the chart name. */}}
{{- define "gpuaccept.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpuaccept.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels on every object. */}}
{{- define "gpuaccept.labels" -}}
helm.sh/chart: {{ include "gpuaccept.chart" . }}
{{ include "gpuaccept.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuaccept
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of the operator pods (immutable in a Deployment: never add to these). */}}
{{- define "gpuaccept.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuaccept.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpuaccept.operatorSelectorLabels" -}}
{{ include "gpuaccept.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "gpuaccept.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpuaccept.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The probe pods' ServiceAccount (no permissions, no token). */}}
{{- define "gpuaccept.probeServiceAccountName" -}}
{{- if .Values.probe.serviceAccount.create }}
{{- default (printf "%s-probe" (include "gpuaccept.fullname" .)) .Values.probe.serviceAccount.name }}
{{- else }}
{{- required "probe.serviceAccount.name is required when probe.serviceAccount.create is false" .Values.probe.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The leader-election Lease in the release namespace (one per installation). */}}
{{- define "gpuaccept.leaseName" -}}
{{- default (include "gpuaccept.fullname" .) .Values.operator.leaderElection.leaseName }}
{{- end }}

{{/* The release's namespace, or namespaceOverride (a chart installed as a
subchart, or from a tool that always installs into one namespace). */}}
{{- define "gpuaccept.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* [registry/]repository[:tag][@digest]. The registry is the image's own
(image.registry), else global.imageRegistry, else the one in repository. A
registry replaces the repository's first path element when that element is a
registry host (it has a "." or a ":", or is "localhost", as Docker reads it),
and is put before the repository otherwise. */}}
{{- define "gpuaccept.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag }}
{{- $registry := .image.registry | default (dig "imageRegistry" "" (.root.Values.global | default dict)) | trimSuffix "/" }}
{{- $repository := .image.repository }}
{{- if $registry }}
{{- $parts := splitList "/" $repository }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repository = rest $parts | join "/" }}
{{- end }}
{{- $repository = printf "%s/%s" $registry $repository }}
{{- end }}
{{- if .image.digest }}
{{- printf "%s@%s" $repository .image.digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/* The operator's command line (gpuaccept operator ...). */}}
{{- define "gpuaccept.operatorArgs" -}}
- operator
- --namespace={{ include "gpuaccept.namespace" . }}
- --lease-name={{ include "gpuaccept.leaseName" . }}
- --lease-duration={{ .Values.operator.leaderElection.leaseDurationSeconds }}
- --log-level={{ .Values.operator.logLevel }}
- --log-format={{ .Values.operator.logFormat }}
- --health-port={{ .Values.operator.healthPort }}
- --metrics-port={{ .Values.operator.metricsPort }}
- --probe-image={{ include "gpuaccept.image" (dict "image" .Values.probe.image "root" .) }}
- --probe-image-pull-policy={{ .Values.probe.image.pullPolicy }}
- --probe-service-account={{ include "gpuaccept.probeServiceAccountName" . }}
- --probe-runtime-class={{ .Values.probe.runtimeClassName }}
- --probe-priority-class={{ .Values.probe.priorityClassName }}
- --probe-timeout={{ .Values.probe.timeoutSeconds }}
- --probe-shm-size={{ .Values.probe.shmSize }}
- --probe-resources={{ toJson .Values.probe.resources }}
- --probe-tolerations={{ toJson .Values.probe.tolerations }}
- --probe-pod-labels={{ toJson .Values.probe.podLabels }}
- --probe-pod-annotations={{ toJson .Values.probe.podAnnotations }}
- --probe-env={{ toJson .Values.probe.env }}
- --fabric-pods={{ toJson .Values.fabric }}
- --max-unavailable-ceiling={{ .Values.operator.maxUnavailableCeiling }}
- --unmatched-grace={{ .Values.operator.unmatchedGraceSeconds }}
{{- with .Values.operator.installationLock }}
- --installation-lock={{ . }}
{{- end }}
{{- with .Values.operator.watchNodeSelector }}
- --node-selector={{ . }}
{{- end }}
{{- if .Values.operator.allowControlPlaneNodes }}
- --allow-control-plane-nodes
{{- end }}
- --dra-driver={{ join "," .Values.operator.draDrivers }}
{{- if not .Values.operator.watchPods }}
- --no-watch-pods
{{- end }}
- --dra-device-class={{ .Values.operator.draDeviceClass }}
{{- range .Values.operator.ownedKeyPrefixes }}
- --owned-key-prefix={{ . }}
{{- end }}
{{- range include "gpuaccept.probeImagePullSecrets" . | fromJsonArray }}
- --probe-image-pull-secret={{ . }}
{{- end }}
{{- end }}

{{/* The probe pods' image pull secrets (names, JSON): imagePullSecrets (the
operator's, usually the same registry) then probe.imagePullSecrets, without repeats. */}}
{{- define "gpuaccept.probeImagePullSecrets" -}}
{{- $names := list }}
{{- range concat .Values.imagePullSecrets .Values.probe.imagePullSecrets }}
{{- $names = append $names .name }}
{{- end }}
{{- $names | uniq | toJson }}
{{- end }}

{{/* The fabric test's pods (labels set by the operator, operator/gpuaccept/operator/core/podspec.py). */}}
{{- define "gpuaccept.fabricPodSelector" -}}
matchLabels:
  app.kubernetes.io/managed-by: gpuaccept
  app.kubernetes.io/component: probe
matchExpressions:
  - key: gpuaccept.io/fabric-pair
    operator: Exists
{{- end }}

{{/* The strictest Pod Security level the release's pods pass (docs/install.md,
"Pod Security"): restricted, unless fabric.capabilities adds a capability
(IPC_LOCK for RDMA), which baseline refuses too. */}}
{{- define "gpuaccept.podSecurityLevel" -}}
{{- if .Values.fabric.capabilities }}privileged{{ else }}restricted{{ end }}
{{- end }}

{{/* Fail on probe-pod values that would break the probe's trust (the operator refuses
them too, operator/gpuaccept/operator/options.py): the probe's own variables
(contracts/gpuaccept/contracts/probe_invocation.py, RESERVED_ENV) in probe.env or
fabric.env, the operator's own label and annotation keys, keys and label values the
API server would refuse. */}}
{{- define "gpuaccept.checkProbePodValues" -}}
{{- $reservedEnv := list "NODE_NAME" "NVIDIA_VISIBLE_DEVICES" "NVIDIA_DRIVER_CAPABILITIES" "CUDA_VISIBLE_DEVICES" "CUDA_DEVICE_ORDER" "PATH" "PYTHONPATH" "PYTHONHOME" "LD_PRELOAD" "LD_LIBRARY_PATH" }}
{{- $qualified := "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$" }}
{{- $ownLabels := list "app.kubernetes.io/managed-by" "app.kubernetes.io/component" "app.kubernetes.io/name" "app.kubernetes.io/instance" }}
{{- range $section, $env := dict "probe.env" .Values.probe.env "fabric.env" .Values.fabric.env }}
{{- range $name, $_ := $env }}
{{- if or (hasPrefix "GPUACCEPT_" $name) (has $name $reservedEnv) }}
{{- fail (printf "%s.%s: the probe's own variable (GPUACCEPT_*, %s): a probe with it set would report on a run the operator did not ask for" $section $name (join ", " $reservedEnv)) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key, $value := .Values.probe.podLabels }}
{{- if not (regexMatch $qualified $key) }}
{{- fail (printf "probe.podLabels: %q is not a label key ([prefix/]name)" $key) }}
{{- end }}
{{- if or (hasPrefix "gpuaccept.io/" $key) (has $key $ownLabels) }}
{{- fail (printf "probe.podLabels.%s: the operator's own label (%s, gpuaccept.io/*): its selectors find probe and operator pods by these" $key (join ", " $ownLabels)) }}
{{- end }}
{{- if not (regexMatch "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$" (toString $value)) }}
{{- fail (printf "probe.podLabels.%s: %q is not a label value" $key (toString $value)) }}
{{- end }}
{{- end }}
{{- range $key, $_ := .Values.probe.podAnnotations }}
{{- if not (regexMatch $qualified $key) }}
{{- fail (printf "probe.podAnnotations: %q is not an annotation key ([prefix/]name)" $key) }}
{{- end }}
{{- if hasPrefix "gpuaccept.io/" $key }}
{{- fail (printf "probe.podAnnotations.%s: the operator's own annotation (gpuaccept.io/*): it reads the fabric pair's nodes back from these" $key) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Fail on an operator reach the operator would refuse (operator/gpuaccept/operator/options.py,
base_node_selector): a key named twice in operator.watchNodeSelector, or a control-plane
role label there without operator.allowControlPlaneNodes. */}}
{{- define "gpuaccept.checkReach" -}}
{{- $keys := list }}
{{- range splitList "," .Values.operator.watchNodeSelector }}
{{- $key := trim (first (splitList "=" (trim .))) }}
{{- if $key }}
{{- if has $key $keys }}
{{- fail (printf "operator.watchNodeSelector: %s is named twice" $key) }}
{{- end }}
{{- if and (has $key (list "node-role.kubernetes.io/control-plane" "node-role.kubernetes.io/master")) (not $.Values.operator.allowControlPlaneNodes) }}
{{- fail (printf "operator.watchNodeSelector: %s is a control-plane role label; control-plane nodes are outside the operator's reach without operator.allowControlPlaneNodes" $key) }}
{{- end }}
{{- $keys = append $keys $key }}
{{- end }}
{{- end }}
{{- end }}

{{/* The nodes the operator judges, as the alternatives that keep a node out of them
(JSON list of nodeSelectorRequirements, any one of which a node matching it is not
judged): each part of operator.watchNodeSelector inverted (`key=value` as `NotIn
[value]`, `key` as `DoesNotExist`); with "" (every Node) and no
operator.allowControlPlaneNodes, a control-plane role label (`Exists`). Empty when
every node may be judged. */}}
{{- define "gpuaccept.judgedNodeExclusion" -}}
{{- $alternatives := list }}
{{- range splitList "," .Values.operator.watchNodeSelector }}
{{- $part := trim . }}
{{- if contains "=" $part }}
{{- $key := trim (first (splitList "=" $part)) }}
{{- $value := trim (trimPrefix (printf "%s=" $key) $part) }}
{{- $alternatives = append $alternatives (dict "key" $key "operator" "NotIn" "values" (list $value)) }}
{{- else if $part }}
{{- $alternatives = append $alternatives (dict "key" $part "operator" "DoesNotExist") }}
{{- end }}
{{- end }}
{{- if and (not $alternatives) (not .Values.operator.allowControlPlaneNodes) }}
{{- range list "node-role.kubernetes.io/control-plane" "node-role.kubernetes.io/master" }}
{{- $alternatives = append $alternatives (dict "key" . "operator" "Exists") }}
{{- end }}
{{- end }}
{{- toJson $alternatives }}
{{- end }}

{{/* The operator pods' affinity (JSON): operator.affinity (or, with replicas > 1 and
none given, the HA default that prefers replicas on different nodes) with, unless
operator.runOnJudgedNodes, every required nodeSelectorTerm made to exclude the nodes
the operator judges (each term crossed with each alternative of
gpuaccept.judgedNodeExclusion: the scheduler then never places it on one). A node it
judged could request the operator's token through the Node authorizer. */}}
{{- define "gpuaccept.operatorAffinity" -}}
{{- $op := .Values.operator }}
{{- $affinity := deepCopy ($op.affinity | default dict) }}
{{- if and (not $affinity) (gt (int $op.replicas) 1) }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "gpuaccept.operatorSelectorLabels" . | fromYaml)) }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- if not $op.runOnJudgedNodes }}
{{- $alternatives := include "gpuaccept.judgedNodeExclusion" . | fromJsonArray }}
{{- if not $alternatives }}
{{- fail "operator.watchNodeSelector \"\" with operator.allowControlPlaneNodes judges every node: the operator would run on a node it judges (and a node could request its token). Set a watchNodeSelector, or operator.runOnJudgedNodes=true to accept that" }}
{{- end }}
{{- $nodeAffinity := $affinity.nodeAffinity | default dict }}
{{- $required := $nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution | default dict }}
{{- $userTerms := $required.nodeSelectorTerms | default (list dict) }}
{{- $terms := list }}
{{- range $userTerms }}
{{- $userTerm := . }}
{{- range $alternatives }}
{{- $term := deepCopy $userTerm }}
{{- $_ := set $term "matchExpressions" (append ($userTerm.matchExpressions | default list) .) }}
{{- $terms = append $terms $term }}
{{- end }}
{{- end }}
{{- $_ := set $required "nodeSelectorTerms" $terms }}
{{- $_ := set $nodeAffinity "requiredDuringSchedulingIgnoredDuringExecution" $required }}
{{- $_ := set $affinity "nodeAffinity" $nodeAffinity }}
{{- end }}
{{- toJson $affinity }}
{{- end }}
