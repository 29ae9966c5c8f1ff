package main

// serve: embedded etcd + upstream kube-apiserver in one foreground process.

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as in cmd/kube-apiserver
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // as in cmd/kube-apiserver
	_ "k8s.io/component-base/metrics/prometheus/version"  // as in cmd/kube-apiserver
	"k8s.io/component-base/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func kubeVersion() string { return version.Get().GitVersion }

// apiserverArgs is the kube-apiserver command line for state s.
func apiserverArgs(s *state) []string {
	p := pkiFiles{dir: filepath.Join(s.Dir, "pki")}
	issuer := "https://kubernetes.default.svc.cluster.local"
	args := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", s.EtcdClientPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", s.APIServerPort),
		"--cert-dir=" + p.dir,
		"--tls-cert-file=" + p.ServingCert(),
		"--tls-private-key-file=" + p.ServingKey(),
		"--client-ca-file=" + p.CACert(),
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + p.SAPub(),
		"--service-account-signing-key-file=" + p.SAKey(),
		"--api-audiences=" + issuer,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// No controller-manager runs here, so nothing would ever remove the
		// node.kubernetes.io/not-ready taint this plugin puts on new Nodes.
		"--disable-admission-plugins=TaintNodesByCondition",
		// The "kubernetes" Service cannot point at a loopback address.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=0",
	}
	return append(args, s.ExtraArgs...)
}

func cmdServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "state directory prepared by `controlplane up`")
	_ = fs.Parse(args)
	d, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	s, err := readState(d)
	if err != nil {
		return fmt.Errorf("%v (serve runs a dir prepared by `controlplane up`)", err)
	}

	// etcd, in-process.
	cfg := embed.NewConfig()
	cfg.Name = "gpuaccept-local"
	cfg.Dir = filepath.Join(d, "etcd")
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", s.EtcdClientPort)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", s.EtcdPeerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true // throw-away test data: no fsync, much faster on slow disks
	cfg.QuotaBackendBytes = 8 << 30
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "5m"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("etcd not ready after 60s")
	}
	go func() {
		if err := <-e.Err(); err != nil {
			fmt.Fprintf(os.Stderr, "etcd error: %v\n", err)
			os.Exit(1)
		}
	}()

	// kube-apiserver, exactly as cmd/kube-apiserver runs it. It handles
	// SIGTERM/SIGINT itself (graceful shutdown), then returns here and etcd
	// is closed by the defer.
	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(apiserverArgs(s))
	if code := cli.Run(cmd); code != 0 {
		return exitErr{code, fmt.Sprintf("kube-apiserver exited with code %d", code)}
	}
	return nil
}
