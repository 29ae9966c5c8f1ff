package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	// cdiVendorClass is the CDI kind of the FAKE GPUs' devices: one CDI device per
	// prepared claim, named after the claim's UID (never reused: the helper's advice
	// against stale CDI caches).
	cdiVendorClass = "gpuaccept.io/fakegpu"
	// profilePath is where a container that gets FAKE GPUs finds the node's hardware
	// profile (GPUACCEPT_PROFILE), as with hack/node/fakedeviceplugin.
	profilePath = "/etc/gpuaccept/fake-gpu-profile.yaml"
)

// driver prepares claims of the FAKE GPUs: a CDI spec file per claim, whose edits
// give the container what hack/node/fakedeviceplugin's Allocate gives it.
type driver struct {
	name    string // the DRA driver name (gpu.nvidia.com)
	pool    string // the node's pool: its name
	cdiDir  string // the container runtime's CDI spec directory
	profile string // host path of the hardware profile, or ""
	cancel  context.CancelFunc
}

func (d *driver) specPath(claim types.UID) string {
	return filepath.Join(d.cdiDir, strings.ReplaceAll(cdiVendorClass, "/", "-")+"_"+string(claim)+".json")
}

// claimSpec is the CDI spec of one claim whose devices on this node are indices.
func (d *driver) claimSpec(claim types.UID, indices []int) (cdispec.Spec, error) {
	visible := make([]string, len(indices))
	for i, index := range indices {
		visible[i] = strconv.Itoa(index)
	}
	edits := cdispec.ContainerEdits{Env: []string{
		"NVIDIA_VISIBLE_DEVICES=" + strings.Join(visible, ","),
		"GPUACCEPT_FAKE_GPU=true",
	}}
	if d.profile != "" {
		edits.Env = append(edits.Env, "GPUACCEPT_PROFILE="+profilePath)
		edits.Mounts = []*cdispec.Mount{{
			HostPath:      d.profile,
			ContainerPath: profilePath,
			Options:       []string{"ro", "nosuid", "nodev", "bind"},
		}}
	}
	spec := cdispec.Spec{
		Kind:    cdiVendorClass,
		Devices: []cdispec.Device{{Name: string(claim), ContainerEdits: edits}},
	}
	// The oldest CDI version that has what the spec uses, as the CDI library
	// computes it: a device name that starts with a digit (most UIDs) needs 0.5.0;
	// containerd 2 refuses a spec that declares less ("the spec version must be at
	// least v0.5.0") and leaves the device unresolvable.
	version, err := cdispec.MinimumRequiredVersion(&spec)
	if err != nil {
		return spec, err
	}
	spec.Version = version
	return spec, nil
}

// writeSpec writes the spec atomically (a runtime never reads half a file).
func writeSpec(path string, spec cdispec.Spec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	staged := path + ".tmp" // not *.json: the runtime's CDI cache ignores it
	if err := os.WriteFile(staged, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(staged, path)
}

// prepare is one claim's CDI device and the devices it covers.
func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	var mine []resourceapi.DeviceRequestAllocationResult
	var indices []int
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != d.name || result.Pool != d.pool {
			continue
		}
		index, err := strconv.Atoi(strings.TrimPrefix(result.Device, "gpu-"))
		if err != nil || deviceName(index) != result.Device {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %q is not one of this node's FAKE GPUs", claim.Namespace, claim.Name, result.Device)}
		}
		mine = append(mine, result)
		indices = append(indices, index)
	}
	sort.Ints(indices)
	spec, err := d.claimSpec(claim.UID, indices)
	if err == nil {
		err = writeSpec(d.specPath(claim.UID), spec)
	}
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: CDI spec: %w", claim.Namespace, claim.Name, err)}
	}
	id := cdiVendorClass + "=" + string(claim.UID)
	result := kubeletplugin.PrepareResult{}
	for i, device := range mine {
		prepared := kubeletplugin.Device{
			Requests:   []string{device.Request},
			PoolName:   device.Pool,
			DeviceName: device.Device,
		}
		if i == 0 { // the claim's one CDI device carries the edits of all its GPUs
			prepared.CDIDeviceIDs = []string{id}
		}
		result.Devices = append(result.Devices, prepared)
	}
	log.Printf("prepared claim %s/%s (%s): GPUs %v, CDI device %s", claim.Namespace, claim.Name, claim.UID, indices, id)
	return result
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		results[claim.UID] = d.prepare(claim)
	}
	return results, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil // idempotent: the kubelet may ask again
		}
		if err == nil {
			log.Printf("unprepared claim %s: CDI spec removed", claim)
		}
		results[claim.UID] = err
	}
	return results, nil
}

// HandleError logs a background error (publishing the slice); a fatal one stops
// the plugin, so that the supervisor sees it exit.
func (d *driver) HandleError(_ context.Context, err error, msg string) {
	log.Printf("%s: %v", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cancel()
	}
}

// WatchHealthStatus: the FAKE GPUs report no health (their health is the profile's,
// which the probe measures).
func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
