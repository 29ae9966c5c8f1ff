package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// The simulated probe's UUIDs (python: simulated_uuid("gpuaccept-node", i)).
func TestSimulatedUUIDIsTheProbes(t *testing.T) {
	for index, want := range map[int]string{
		0: "GPU-54f980a3-e054-5ccd-921e-749ae2300884",
		7: "GPU-8a61a925-8f47-5017-a108-b77449ab33c6",
	} {
		if got := simulatedUUID("gpuaccept-node", index); got != want {
			t.Errorf("GPU %d: %s, want %s", index, got, want)
		}
	}
}

func TestDriverVersionAsSemver(t *testing.T) {
	for in, want := range map[string]string{"570.124.06": "570.124.6", "550.54.15": "550.54.15", "550.54": "", "r550": ""} {
		got, ok := semverOf(in)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", in, got, ok, want)
		}
	}
}

func TestDevicesAsTheStandInPublishes(t *testing.T) {
	devices := fakeDevices("gpuaccept-node", 8, "NVIDIA H100 80GB HBM3", "550.54.15")
	if len(devices) != 8 || devices[3].Name != "gpu-3" {
		t.Fatalf("devices: %+v", devices)
	}
	a := devices[3].Attributes
	if *a["type"].StringValue != "gpu" || *a["index"].IntValue != 3 ||
		*a["uuid"].StringValue != simulatedUUID("gpuaccept-node", 3) ||
		*a["productName"].StringValue != "NVIDIA H100 80GB HBM3" || *a["driverVersion"].VersionValue != "550.54.15" {
		t.Errorf("attributes: %+v", a)
	}
}

func allocated(uid string, devices ...string) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: types.UID(uid)}}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	for _, device := range devices {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: "gpu.nvidia.com", Pool: "gpuaccept-node", Device: device})
	}
	return claim
}

// Prepare writes the claim's CDI spec (the FAKE device plugin's Allocate, as edits)
// and returns its one CDI device; unprepare removes it, twice without error.
func TestPrepareWritesTheClaimsCDISpecAndUnprepareRemovesIt(t *testing.T) {
	dir := t.TempDir()
	d := &driver{name: "gpu.nvidia.com", pool: "gpuaccept-node", cdiDir: dir, profile: "/node/fake-gpu-profile.yaml"}
	claim := allocated("0b6c", "gpu-5", "gpu-2") // a UID that starts with a digit
	results, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil || results["0b6c"].Err != nil {
		t.Fatalf("prepare: %v %v", err, results["0b6c"].Err)
	}
	devices := results["0b6c"].Devices
	if len(devices) != 2 || !reflect.DeepEqual(devices[0].CDIDeviceIDs, []string{"gpuaccept.io/fakegpu=0b6c"}) || len(devices[1].CDIDeviceIDs) != 0 {
		t.Errorf("devices: %+v", devices)
	}
	path := filepath.Join(dir, "gpuaccept.io-fakegpu_0b6c.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if err := cdispec.ValidateVersion(&spec); err != nil || spec.Version != "0.5.0" {
		t.Errorf("version %s: %v (a name that starts with a digit needs 0.5.0)", spec.Version, err)
	}
	edits := spec.Devices[0].ContainerEdits
	want := []string{"NVIDIA_VISIBLE_DEVICES=2,5", "GPUACCEPT_FAKE_GPU=true", "GPUACCEPT_PROFILE=/etc/gpuaccept/fake-gpu-profile.yaml"}
	if spec.Kind != "gpuaccept.io/fakegpu" || spec.Devices[0].Name != "0b6c" || !reflect.DeepEqual(edits.Env, want) {
		t.Errorf("spec: %s", data)
	}
	if len(edits.Mounts) != 1 || edits.Mounts[0].HostPath != "/node/fake-gpu-profile.yaml" || edits.Mounts[0].Options[0] != "ro" {
		t.Errorf("mounts: %s", data)
	}
	for range 2 {
		gone, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "0b6c"}})
		if err != nil || gone["0b6c"] != nil {
			t.Fatalf("unprepare: %v %v", err, gone["0b6c"])
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", path, err)
	}
}

// A device that is not one of the FAKE GPUs fails the claim; another pool's are not ours.
func TestPrepareRefusesAForeignDevice(t *testing.T) {
	d := &driver{name: "gpu.nvidia.com", pool: "gpuaccept-node", cdiDir: t.TempDir()}
	results, _ := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{allocated("u", "mig-1")})
	if results["u"].Err == nil {
		t.Error("mig-1 prepared")
	}
}
