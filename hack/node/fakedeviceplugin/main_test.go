package main

import (
	"context"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func allocate(t *testing.T, p *plugin, ids ...string) *pluginapi.ContainerAllocateResponse {
	t.Helper()
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 1 {
		t.Fatalf("%d container responses, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0]
}

func TestWithoutCDIAllocateNamesNoCDIDevice(t *testing.T) {
	r := allocate(t, &plugin{}, "FAKE-GPU-0", "FAKE-GPU-3")
	if len(r.CdiDevices) != 0 {
		t.Fatalf("CDI devices %v, want none", r.CdiDevices)
	}
	if got := r.Envs["NVIDIA_VISIBLE_DEVICES"]; got != "0,3" {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES %q, want 0,3", got)
	}
}

func TestWithCDIEachAllocatedDeviceIsNamedInItsKind(t *testing.T) {
	r := allocate(t, &plugin{cdiKind: "gpuaccept.io/cdi-test"}, "FAKE-GPU-0", "FAKE-GPU-3")
	var names []string
	for _, d := range r.CdiDevices {
		names = append(names, d.Name)
	}
	want := []string{"gpuaccept.io/cdi-test=FAKE-GPU-0", "gpuaccept.io/cdi-test=FAKE-GPU-3"}
	if len(names) != len(want) || names[0] != want[0] || names[1] != want[1] {
		t.Fatalf("CDI devices %v, want %v", names, want)
	}
}
