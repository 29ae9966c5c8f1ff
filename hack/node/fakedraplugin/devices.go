package main

import (
	"crypto/sha1"
	"fmt"
	"os"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// simUUIDNamespace is the UUID namespace of the simulated probe's GPUs
// (probes/gpuaccept/probe/hardware/simulated.py, SIM_UUID_NAMESPACE): a FAKE GPU
// is published under the UUID the simulated probe reports for it.
var simUUIDNamespace = [16]byte{
	0x6b, 0x1f, 0x3c, 0x52, 0x5a, 0x3e, 0x4c, 0x1e,
	0x9a, 0x57, 0x0c, 0x6a, 0x4f, 0x1d, 0x9e, 0x21,
}

// simulatedUUID is simulated_uuid(node, index) of the probe: "GPU-" and the
// name-based (SHA-1, version 5) UUID of "<node>/<index>" in simUUIDNamespace
// (RFC 9562 section 5.5, as Python's uuid.uuid5).
func simulatedUUID(node string, index int) string {
	h := sha1.New()
	h.Write(simUUIDNamespace[:])
	h.Write([]byte(fmt.Sprintf("%s/%d", node, index)))
	sum := h.Sum(nil)
	sum[6] = (sum[6] & 0x0f) | 0x50 // version 5
	sum[8] = (sum[8] & 0x3f) | 0x80 // RFC 4122 variant
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}

// profileGPUs is what the FAKE GPUs take from a hardware profile
// (docs/profile-format.md): their count, their model and the driver's version.
type profileGPUs struct {
	GPUs struct {
		Model string `json:"model"`
		Count int    `json:"count"`
	} `json:"gpus"`
	Driver struct {
		Version string `json:"version"`
	} `json:"driver"`
}

func readProfile(path string) (profileGPUs, error) {
	var p profileGPUs
	data, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	if err := yaml.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// gpuMemory is the memory capacity the kubelet stand-in publishes for each GPU
// (testsupport/gpuaccept/testsupport/standin_dra.py, DraGpu.device).
var gpuMemory = resource.MustParse("80Gi")

// deviceName is how NVIDIA's DRA driver names a whole GPU: gpu-<minor>.
func deviceName(index int) string { return fmt.Sprintf("gpu-%d", index) }

// fakeDevices are the node's COUNT FAKE GPUs as NVIDIA's DRA driver publishes
// whole GPUs (cmd/gpu-kubelet-plugin/deviceinfo.go, GpuInfo.GetDevice), with the
// attributes the kubelet stand-in publishes (standin_dra.py): type "gpu", uuid,
// productName, index, and driverVersion (a version attribute) when the profile
// states one; capacity memory.
func fakeDevices(node string, count int, productName, driverVersion string) []resourceapi.Device {
	devices := make([]resourceapi.Device, 0, count)
	for i := 0; i < count; i++ {
		index := int64(i)
		attributes := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":        {StringValue: ptr("gpu")},
			"uuid":        {StringValue: ptr(simulatedUUID(node, i))},
			"productName": {StringValue: ptr(productName)},
			"index":       {IntValue: &index},
		}
		if version, ok := semverOf(driverVersion); ok {
			attributes["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr(version)}
		}
		devices = append(devices, resourceapi.Device{
			Name:       deviceName(i),
			Attributes: attributes,
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: gpuMemory},
			},
		})
	}
	return devices
}

func ptr[T any](v T) *T { return &v }

// semverOf is an NVIDIA driver version ("570.124.06") as the semantic version a
// version attribute must be: leading zeros dropped ("570.124.6"), as NVIDIA's
// driver does through Masterminds/semver. False when it is not three numbers.
func semverOf(version string) (string, bool) {
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		return "", false
	}
	for i, part := range parts {
		n, err := strconv.ParseUint(part, 10, 32)
		if err != nil {
			return "", false
		}
		parts[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(parts, "."), true
}
