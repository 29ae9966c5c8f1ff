package main

// Attached processes: programs that run against a control plane (the demo's
// operator and kubelet stand-in) register in <dir>/attached/NAME.pid, so that
// `down` stops them before the control plane. Without this, stopping the
// cluster left them retrying forever against a dead API server.
//
// A registration file holds "PID STARTTIME" (STARTTIME is field 22 of
// /proc/PID/stat), so a PID reused by an unrelated process is never signalled.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const attachedDir = "attached"

type attachedProcess struct {
	name      string
	pid       int
	startTime string
}

// procStartTime is field 22 of /proc/PID/stat, or "" when the process is gone.
func procStartTime(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	// Fields after "(comm)" start at field 3; starttime is field 22.
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return ""
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return ""
	}
	return fields[19]
}

func (p attachedProcess) running() bool {
	return p.pid > 0 && procStartTime(p.pid) == p.startTime
}

func readAttached(d string) []attachedProcess {
	paths, _ := filepath.Glob(filepath.Join(d, attachedDir, "*.pid"))
	var out []attachedProcess
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b))
		if len(fields) != 2 {
			fmt.Fprintf(os.Stderr, "%s: expected \"PID STARTTIME\", ignored\n", path)
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil || pid <= 1 {
			fmt.Fprintf(os.Stderr, "%s: bad pid %q, ignored\n", path, fields[0])
			continue
		}
		name := strings.TrimSuffix(filepath.Base(path), ".pid")
		out = append(out, attachedProcess{name: name, pid: pid, startTime: fields[1]})
	}
	return out
}

// stopAttached sends SIGTERM to each registered process group that still runs,
// waits up to grace, then SIGKILLs what is left. It returns the names of the
// processes that could not be stopped.
func stopAttached(d string, grace time.Duration) []string {
	procs := readAttached(d)
	var live []attachedProcess
	for _, p := range procs {
		if p.running() {
			_ = syscall.Kill(-p.pid, syscall.SIGTERM)
			_ = syscall.Kill(p.pid, syscall.SIGTERM)
			live = append(live, p)
		}
	}
	deadline := time.Now().Add(grace)
	for _, p := range live {
		for p.running() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	var stuck []string
	for _, p := range live {
		if p.running() {
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			for i := 0; i < 50 && p.running(); i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if p.running() {
			stuck = append(stuck, fmt.Sprintf("%s (pid %d)", p.name, p.pid))
		} else {
			fmt.Printf("stopped %s (pid %d)\n", p.name, p.pid)
		}
	}
	_ = os.RemoveAll(filepath.Join(d, attachedDir))
	return stuck
}
