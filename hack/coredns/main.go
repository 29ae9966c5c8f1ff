// Command coredns is CoreDNS (github.com/coredns/coredns) with only the
// plugins the local real node's cluster DNS needs (docs/realnode.md): bind
// listens on the node's bridge address, kubernetes answers
// <service>.<namespace>.svc.cluster.local from the API (Services,
// EndpointSlices), forward sends other names to the host's resolver. The same code as CoreDNS's own main, with a shorter plugin list
// (CoreDNS's documented way to compile a custom set: core/dnsserver.Directives).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// In the order of CoreDNS's plugin.cfg.
	dnsserver.Directives = []string{"bind", "ready", "errors", "log", "kubernetes", "forward"}
}

func main() {
	coremain.Run()
}
