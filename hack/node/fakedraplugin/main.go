// Command fakedraplugin is a FAKE DRA kubelet plugin for the local real node
// (docs/realnode.md), the Dynamic Resource Allocation counterpart of
// hack/node/fakedeviceplugin. Built on the kubelet plugin helpers of
// k8s.io/dynamic-resource-allocation (kubeletplugin), at the Kubernetes version of
// the node, it
//
//   - publishes the node's pool, named after the node, of DRIVER (default
//     gpu.nvidia.com, NVIDIA's DRA driver) with COUNT FAKE GPUs as that driver
//     publishes whole GPUs: devices gpu-<index> with the attributes type, uuid (the
//     UUID the simulated probe reports for that GPU of this node), productName and
//     driverVersion (from -profile), index, and a memory capacity, as the kubelet
//     stand-in does (testsupport/gpuaccept/testsupport/standin_dra.py);
//   - prepares a claim allocated on this node by writing one CDI spec file into
//     -cdi-dir (kind gpuaccept.io/fakegpu, one device per claim, named by the
//     claim's UID) whose container edits give what the FAKE device plugin's
//     Allocate gives: NVIDIA_VISIBLE_DEVICES with the indices of the claim's GPUs,
//     GPUACCEPT_FAKE_GPU=true and, with -profile, the profile mounted read-only and
//     GPUACCEPT_PROFILE; unprepare removes the file. The container runtime must
//     read CDI specs from that directory (containerd >= 1.7 with enable_cdi).
//
// There are no GPUs behind it. Test support only; never install it on a real node.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "credentials for the API server (the slice, the claims)")
	nodeName := flag.String("node-name", "", "the node: its pool and the UUIDs of its FAKE GPUs")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's --root-dir (plugins_registry, plugins)")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "the container runtime's CDI spec directory")
	driverName := flag.String("driver", "gpu.nvidia.com", "DRA driver name")
	count := flag.Int("count", 0, "number of FAKE GPUs (0: the profile's gpus.count)")
	profile := flag.String("profile", "", "hardware profile (host path): the GPUs' model, driver version, count; handed to containers as GPUACCEPT_PROFILE")
	flag.Parse()
	log.SetPrefix("fakedraplugin: ")
	if *nodeName == "" || *kubeconfig == "" {
		log.Fatal("-node-name and -kubeconfig are required")
	}

	product, version, gpus := "FAKE GPU", "", *count
	if *profile != "" {
		p, err := readProfile(*profile)
		if err != nil {
			log.Fatal(err)
		}
		if p.GPUs.Model != "" {
			product = p.GPUs.Model
		}
		version = p.Driver.Version
		if gpus == 0 {
			gpus = p.GPUs.Count
		}
	}
	if gpus <= 0 {
		log.Fatal("no FAKE GPUs: give -count or a -profile with gpus.count")
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		log.Fatal(err)
	}
	registry := filepath.Join(*kubeletDir, "plugins_registry")
	dataDir := filepath.Join(*kubeletDir, "plugins", *driverName)
	for _, dir := range []string{registry, dataDir, *cdiDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			log.Fatal(err)
		}
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	d := &driver{name: *driverName, pool: *nodeName, cdiDir: *cdiDir, profile: *profile, cancel: cancel}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(*driverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		log.Fatalf("start the kubelet plugin: %v", err)
	}
	defer helper.Stop()

	pool := resourceslice.Pool{Slices: []resourceslice.Slice{{Devices: fakeDevices(*nodeName, gpus, product, version)}}}
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{*nodeName: pool}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		log.Fatalf("publish the ResourceSlice: %v", err)
	}
	log.Printf("serving %s on %s: pool %s with %d FAKE GPUs (%s), CDI specs in %s", *driverName, *nodeName, *nodeName, gpus, product, *cdiDir)
	<-ctx.Done()
	log.Printf("stopping")
}
