package main

// up / down / status: the background-process lifecycle around `serve`.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	stateFile   = "state.json"
	pidFile     = "controlplane.pid"
	logFile     = "controlplane.log"
	kubeconfig  = "kubeconfig"
	lockFile    = ".lock"
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
)

// state is written by `up` to <dir>/state.json and read by `serve`, `down`,
// `status` and the Python test support (gpuaccept.testsupport.controlplane).
type state struct {
	PID            int    `json:"pid"`
	Server         string `json:"server"`
	APIServerPort  int    `json:"apiserverPort"`
	EtcdClientPort int    `json:"etcdClientPort"`
	EtcdPeerPort   int    `json:"etcdPeerPort"`
	Dir            string `json:"dir"`
	Kubeconfig     string `json:"kubeconfig"`
	LogFile        string `json:"logFile"`
	StartedAt      string `json:"startedAt"`
	Version        string `json:"kubernetesVersion"`
	// ExtraArgs are appended to the kube-apiserver command line.
	ExtraArgs []string `json:"extraAPIServerArgs,omitempty"`
}

func readState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	return &s, nil
}

func writeState(dir string, s *state) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// lockDir takes an exclusive flock on <dir>/.lock so that concurrent `up` /
// `down` calls on the same dir serialise. The returned func releases it.
func lockDir(dir string) (func(), error) {
	for {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		p := filepath.Join(dir, lockFile)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		// `down` may have removed the dir while we waited: retry on the new file.
		var st1, st2 syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &st1) == nil && syscall.Stat(p, &st2) == nil && st1.Ino == st2.Ino {
			return func() { f.Close() }, nil
		}
		f.Close()
	}
}

// alive reports whether pid is a live (non-zombie) `controlplane serve` process.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		// "pid (comm) S ..." - the state letter follows the last ')'.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) {
			if st := stat[i+2]; st == 'Z' || st == 'X' {
				return false
			}
		}
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// A process that is exiting has released its memory, so its cmdline reads
	// empty before it becomes a zombie: it is still alive (and may still hold
	// its ports) until then.
	if len(cmdline) == 0 {
		return true
	}
	return bytes.Contains(cmdline, []byte("serve"))
}

// freePorts reserves n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func portListening(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func adminClient(dir string) (*http.Client, error) {
	p := pkiFiles{dir: filepath.Join(dir, "pki")}
	caPEM, err := os.ReadFile(p.CACert())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no CA in %s", p.CACert())
	}
	cert, err := tls.LoadX509KeyPair(p.AdminCert(), p.AdminKey())
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}, nil
}

// ready reports nil when /readyz says ok and the "default" namespace exists
// (created by the apiserver's bootstrap controller shortly after start).
func ready(c *http.Client, server string) error {
	get := func(path string) (int, string, error) {
		resp, err := c.Get(server + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, string(b), nil
	}
	code, body, err := get("/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		return fmt.Errorf("/readyz: %d %s", code, strings.TrimSpace(body))
	}
	for _, ns := range []string{"default", "kube-system"} {
		code, body, err = get("/api/v1/namespaces/" + ns)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("namespace %s: %d %s", ns, code, strings.TrimSpace(body))
		}
	}
	return nil
}

func waitReady(ctx context.Context, dir, server string, exited <-chan error) error {
	c, err := adminClient(dir)
	if err != nil {
		return err
	}
	var last error
	for {
		if last = ready(c, server); last == nil {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("control plane process exited during start (%v); last lines of %s:\n%s",
				err, filepath.Join(dir, logFile), tail(filepath.Join(dir, logFile), 30))
		case <-ctx.Done():
			return fmt.Errorf("not ready after timeout: %v; see %s", last, filepath.Join(dir, logFile))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func writeKubeconfig(dir, server string) error {
	p := pkiFiles{dir: filepath.Join(dir, "pki")}
	read := func(path string) (string, error) {
		b, err := os.ReadFile(path)
		return base64.StdEncoding.EncodeToString(b), err
	}
	ca, err := read(p.CACert())
	if err != nil {
		return err
	}
	crt, err := read(p.AdminCert())
	if err != nil {
		return err
	}
	key, err := read(p.AdminKey())
	if err != nil {
		return err
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: gpuaccept-local
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kubernetes-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: gpuaccept-local
  context:
    cluster: gpuaccept-local
    user: kubernetes-admin
    namespace: default
current-context: gpuaccept-local
preferences: {}
`, server, ca, crt, key)
	return os.WriteFile(filepath.Join(dir, kubeconfig), []byte(kc), 0o600)
}

// clearState removes everything in dir except the lock file.
func clearState(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() == lockFile {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func cmdUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "state directory (certs, etcd data, kubeconfig, log, pid file)")
	port := fs.Int("port", 0, "kube-apiserver secure port on 127.0.0.1 (0: pick a free port)")
	timeout := fs.Duration("timeout", 120*time.Second, "how long to wait for /readyz")
	failIfRunning := fs.Bool("fail-if-running", false, "fail instead of reusing a control plane already running in --dir")
	printJSON := fs.Bool("json", false, "print the state as one JSON line on stdout at the end, with \"reused\": true|false")
	var extra multiFlag
	fs.Var(&extra, "apiserver-arg", "extra kube-apiserver flag, e.g. --apiserver-arg=--v=2 (repeatable)")
	_ = fs.Parse(args)

	d, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	unlock, err := lockDir(d)
	if err != nil {
		return err
	}
	defer unlock()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	if s, err := readState(d); err == nil {
		if alive(s.PID) {
			if *failIfRunning {
				return exitErr{3, fmt.Sprintf("a control plane is already running in %s (pid %d, %s); "+
					"use it via %s or stop it with `make cluster-down`", d, s.PID, s.Server, s.Kubeconfig)}
			}
			if err := waitReady(ctx, d, s.Server, nil); err != nil {
				return fmt.Errorf("a control plane is already running in %s (pid %d, %s) but is not ready: %v; "+
					"stop it with `make cluster-down`", d, s.PID, s.Server, err)
			}
			fmt.Fprintf(os.Stderr, "control plane already running in %s (pid %d), reusing it\n", d, s.PID)
			return report(s, true, *printJSON)
		}
		fmt.Fprintf(os.Stderr, "found stale state in %s (pid %d not running): discarding it\n", d, s.PID)
	}
	if err := clearState(d); err != nil {
		return err
	}

	t0 := time.Now()
	if err := generatePKI(pkiFiles{dir: filepath.Join(d, "pki")}); err != nil {
		return fmt.Errorf("generating certificates: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	if *port != 0 {
		if portListening(*port) {
			return fmt.Errorf("port %d on 127.0.0.1 is already in use", *port)
		}
		ports[0] = *port
	}
	s := &state{
		Server:         fmt.Sprintf("https://127.0.0.1:%d", ports[0]),
		APIServerPort:  ports[0],
		EtcdClientPort: ports[1],
		EtcdPeerPort:   ports[2],
		Dir:            d,
		Kubeconfig:     filepath.Join(d, kubeconfig),
		LogFile:        filepath.Join(d, logFile),
		Version:        kubeVersion(),
		ExtraArgs:      extra,
	}
	if err := writeKubeconfig(d, s.Server); err != nil {
		return err
	}
	if err := writeState(d, s); err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd := exec.Command(self, "serve", "--dir", d)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // survive the caller (make, pytest)
	cmd.Dir = d
	if err := cmd.Start(); err != nil {
		return err
	}
	s.PID = cmd.Process.Pid
	s.StartedAt = time.Now().UTC().Format(time.RFC3339)
	if err := writeState(d, s); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, pidFile), []byte(strconv.Itoa(s.PID)+"\n"), 0o644); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	if err := waitReady(ctx, d, s.Server, exited); err != nil {
		_ = syscall.Kill(-s.PID, syscall.SIGKILL)
		return err
	}
	fmt.Fprintf(os.Stderr, "control plane ready in %.1fs\n", time.Since(t0).Seconds())
	return report(s, false, *printJSON)
}

func report(s *state, reused, asJSON bool) error {
	if !asJSON {
		printSummary(s)
		return nil
	}
	b, err := json.Marshal(struct {
		*state
		Reused bool `json:"reused"`
	}{s, reused})
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

func printSummary(s *state) {
	fmt.Printf("  server:     %s\n  kubeconfig: %s\n  pid:        %d\n  log:        %s\n",
		s.Server, s.Kubeconfig, s.PID, s.LogFile)
}

func cmdDown(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "state directory given to up")
	timeout := fs.Duration("timeout", 30*time.Second, "grace period before SIGKILL")
	keep := fs.Bool("keep-state", false, "stop the processes but keep the state directory")
	_ = fs.Parse(args)

	d, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
		fmt.Printf("no control plane state in %s; nothing to do\n", d)
		return nil
	}
	unlock, err := lockDir(d)
	if err != nil {
		return err
	}
	defer unlock()

	s, err := readState(d)
	if err != nil {
		fmt.Fprintf(os.Stderr, "no readable state in %s (%v)\n", d, err)
		s = &state{}
		if b, err := os.ReadFile(filepath.Join(d, pidFile)); err == nil {
			s.PID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	// First what runs against the cluster (the demo's operator and stand-in).
	if stuck := stopAttached(d, *timeout); len(stuck) > 0 {
		return fmt.Errorf("attached processes still running: %s", strings.Join(stuck, ", "))
	}
	if alive(s.PID) {
		// serve runs in its own session: signal the whole process group.
		_ = syscall.Kill(-s.PID, syscall.SIGTERM)
		deadline := time.Now().Add(*timeout)
		for alive(s.PID) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(s.PID) {
			fmt.Fprintf(os.Stderr, "pid %d did not stop within %s: SIGKILL\n", s.PID, *timeout)
			_ = syscall.Kill(-s.PID, syscall.SIGKILL)
			for i := 0; i < 50 && alive(s.PID); i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if alive(s.PID) {
			return fmt.Errorf("pid %d is still running", s.PID)
		}
		fmt.Printf("stopped control plane (pid %d)\n", s.PID)
	} else if s.PID != 0 {
		fmt.Printf("control plane pid %d was not running\n", s.PID)
	}
	if err := checkPortsFreed(s); err != nil {
		return err
	}
	if !*keep {
		if err := clearState(d); err != nil {
			return err
		}
		unlock()
		if err := os.RemoveAll(d); err != nil {
			return err
		}
		fmt.Printf("removed %s\n", d)
	}
	return nil
}

// checkPortsFreed fails when one of the control plane's ports is still held by its
// own process group after the stop. Once its ports are free another process may
// take one at once (the tests start control planes side by side on ports the
// kernel picks): a listener in another process group is said, not an error.
func checkPortsFreed(s *state) error {
	for _, p := range []int{s.APIServerPort, s.EtcdClientPort, s.EtcdPeerPort} {
		if p == 0 || !portListening(p) {
			continue
		}
		groups, known := listenerGroups(p)
		if !known {
			return fmt.Errorf("port %d on 127.0.0.1 is still listening after stop", p)
		}
		for _, g := range groups {
			if s.PID != 0 && g == s.PID {
				return fmt.Errorf("port %d on 127.0.0.1 is still held by the control plane's process group %d after stop", p, g)
			}
		}
		fmt.Printf("port %d is listening again, held by another process group (%v): not this control plane's\n", p, groups)
	}
	return nil
}

func cmdStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "state directory given to up")
	asJSON := fs.Bool("json", false, "print state.json")
	_ = fs.Parse(args)
	d, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	s, err := readState(d)
	if err != nil {
		return exitErr{1, fmt.Sprintf("no control plane in %s", d)}
	}
	if *asJSON {
		b, _ := json.MarshalIndent(s, "", "  ")
		fmt.Println(string(b))
	}
	if !alive(s.PID) {
		return exitErr{1, fmt.Sprintf("control plane in %s is not running (stale pid %d)", d, s.PID)}
	}
	c, err := adminClient(d)
	if err != nil {
		return err
	}
	if err := ready(c, s.Server); err != nil {
		return exitErr{1, fmt.Sprintf("control plane pid %d is running but not ready: %v", s.PID, err)}
	}
	if !*asJSON {
		fmt.Println("running and ready")
		printSummary(s)
	}
	return nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
