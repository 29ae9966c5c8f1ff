// Command fakedeviceplugin is a FAKE device plugin for the local real node
// (docs/realnode.md). It advertises COUNT devices of RESOURCE (default
// nvidia.com/gpu) to the kubelet through the public device plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), so that the kubelet admits
// pods that request GPUs. There are no GPUs behind it: the device IDs are
// FAKE-GPU-<n>, Allocate hands the container only environment variables
// (NVIDIA_VISIBLE_DEVICES with their indices, GPUACCEPT_FAKE_GPU=true) and no
// device nodes. With -profile FILE it also mounts that hardware profile
// read-only into the container and sets GPUACCEPT_PROFILE to it, so that
// `gpuaccept probe` measures the simulated hardware the profile describes (the
// report says "simulated"). With -cdi KIND (vendor/class) Allocate also names
// each device as the CDI device KIND=<device ID> (ContainerAllocateResponse
// CDIDevices): the kubelet passes the names to the runtime, which applies the
// edits of a CDI spec for KIND that must be in its spec directories, or the
// container fails to start. Test support only; never install it on a real node.
//
// It registers with the kubelet at DIR/kubelet.sock, serves on DIR/SOCKET
// (-socket, default gpuaccept-fake-gpu.sock), and registers again when the
// kubelet restarts (the kubelet removes plugin sockets when it starts).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	profile string // host path of a hardware profile for the probe's simulated backend, or ""
	cdiKind string // CDI vendor/class the devices are named in, or "" (no CDI devices)
}

// profilePath is where a container that gets FAKE GPUs finds the node's
// hardware profile (GPUACCEPT_PROFILE): the FAKE GPUs' stand-in for NVML.
const profilePath = "/etc/gpuaccept/fake-gpu-profile.yaml"

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once and then holds the stream open:
// the fake devices never change health.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		log.Printf("allocate %v (fake: no device nodes)", c.DevicesIds)
		r := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": visibleDevices(c.DevicesIds),
				"GPUACCEPT_FAKE_GPU":     "true",
			},
		}
		if p.profile != "" {
			r.Envs["GPUACCEPT_PROFILE"] = profilePath
			r.Mounts = []*pluginapi.Mount{{ContainerPath: profilePath, HostPath: p.profile, ReadOnly: true}}
		}
		if p.cdiKind != "" {
			for _, id := range c.DevicesIds {
				r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: p.cdiKind + "=" + id})
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

// visibleDevices is NVIDIA_VISIBLE_DEVICES for the allocated FAKE-GPU-<n> devices: their
// indices, as the NVIDIA device plugin hands them with deviceIDStrategy index. The
// simulated probe shows only these GPUs of its profile (probe/hardware/simulated_visible.py).
func visibleDevices(ids []string) string {
	indices := make([]string, 0, len(ids))
	for _, id := range ids {
		indices = append(indices, strings.TrimPrefix(id, "FAKE-GPU-"))
	}
	return strings.Join(indices, ",")
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func serve(dir, socketName string, p *plugin) (*grpc.Server, error) {
	path := filepath.Join(dir, socketName)
	_ = os.Remove(path)
	listener, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(listener) }()
	return server, nil
}

func register(dir, socketName, resource string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     socketName,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	return err
}

// start serves and registers, retrying until the kubelet answers.
func start(dir, socketName, resource string, p *plugin, stop <-chan os.Signal) (*grpc.Server, bool) {
	for {
		server, err := serve(dir, socketName, p)
		if err == nil {
			if err = register(dir, socketName, resource); err == nil {
				log.Printf("registered %s with the kubelet: %d FAKE devices", resource, len(p.devices))
				return server, true
			}
			server.Stop()
		}
		log.Printf("not registered yet: %v", err)
		select {
		case <-stop:
			return nil, false
		case <-time.After(time.Second):
		}
	}
}

func main() {
	dir := flag.String("plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name to advertise")
	count := flag.Int("count", 8, "number of FAKE devices")
	profile := flag.String("profile", "", "hardware profile (host path) handed to containers as GPUACCEPT_PROFILE")
	socketName := flag.String("socket", "gpuaccept-fake-gpu.sock", "socket name in the plugin directory")
	cdiKind := flag.String("cdi", "", "CDI kind (vendor/class): name each allocated device KIND=<device ID> in CDIDevices")
	flag.Parse()
	log.SetPrefix("fakedeviceplugin: ")
	p := &plugin{profile: *profile, cdiKind: *cdiKind}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("FAKE-GPU-%d", i), Health: pluginapi.Healthy})
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	path := filepath.Join(*dir, *socketName)
	for {
		server, ok := start(*dir, *socketName, *resource, p, stop)
		if !ok {
			return
		}
		// The kubelet deletes our socket when it restarts: register again.
		for gone := false; !gone; {
			select {
			case <-stop:
				server.Stop()
				_ = os.Remove(path)
				return
			case <-time.After(time.Second):
				_, err := os.Stat(path)
				gone = err != nil
			}
		}
		log.Printf("%s was removed (kubelet restart): registering again", path)
		server.Stop()
	}
}
