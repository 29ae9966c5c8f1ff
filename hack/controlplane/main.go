// Command controlplane runs a local Kubernetes control plane for gpuaccept's
// tests, demo and benchmarks: an embedded etcd (go.etcd.io/etcd/server/v3/embed)
// and the upstream kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver/app),
// both in one process, listening on 127.0.0.1 only.
//
// Subcommands:
//
//	controlplane up     --dir .cluster   start (or reuse) a control plane in the background, wait for /readyz
//	controlplane down   --dir .cluster   stop it (pid file) and remove the state dir
//	controlplane status --dir .cluster   print the state; exit 0 if running and ready, 1 otherwise
//	controlplane serve  --dir .cluster   run in the foreground (what `up` starts)
//
// There is no kube-controller-manager, no scheduler and no kubelet; see
// docs/controlplane.md.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: controlplane <up|down|status|serve> [flags]

  up      start a control plane in the background (or reuse the running one), wait for /readyz
  down    stop the control plane started in --dir and remove --dir
  status  print state; exit 0 when running and ready
  serve   run etcd + kube-apiserver in the foreground (used by up)

Run "controlplane <cmd> -h" for the flags of a subcommand.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = cmdUp(os.Args[2:])
	case "down":
		err = cmdDown(os.Args[2:])
	case "status":
		err = cmdStatus(os.Args[2:])
	case "serve":
		err = cmdServe(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "controlplane: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane %s: %v\n", os.Args[1], err)
		if ec, ok := err.(exitCoder); ok {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

type exitCoder interface{ ExitCode() int }

type exitErr struct {
	code int
	msg  string
}

func (e exitErr) Error() string { return e.msg }
func (e exitErr) ExitCode() int { return e.code }
