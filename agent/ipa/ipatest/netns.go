package ipatest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// Netns is a network namespace a test made: its loopback holding the
// addresses given (no kernel module needed, unlike a dummy interface) and
// no other interface or route, so what runs inside reaches only what runs
// inside. Ironic's conductor
// checks an image URL with requests of its own before it hands the URL to
// the agent, so a deploy needs an address that is the image server for
// Ironic and for a QEMU guest alike: in the namespace a slirp guestfwd
// address can be a real local address too.
type Netns struct {
	Name string
	h    netns.NsHandle
}

// NewNetns makes a namespace holding addrs (e.g. "10.0.2.100/32") on its
// loopback; it is deleted when the test ends (after everything
// started inside was stopped: cleanups run last-in first-out). It needs
// root.
func NewNetns(t testing.TB, addrs ...string) *Netns {
	t.Helper()
	name := fmt.Sprintf("anvil-ipa-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	for _, a := range addrs {
		ip("-n", name, "addr", "add", a, "dev", "lo")
	}
	ip("-n", name, "link", "set", "lo", "up")
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("open namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return &Netns{Name: name, h: h}
}

// Command is name args... run inside the namespace (ip netns exec, which
// execs, so the process's pid is the command's).
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// do runs fn on a thread switched into the namespace: sockets made there
// stay in it, whichever thread uses them later.
func (n *Netns) do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(n.h); err != nil {
		return fmt.Errorf("enter namespace %s: %w", n.Name, err)
	}
	// A thread that cannot go back must not run other goroutines: leaving
	// it locked makes the runtime end it with this goroutine.
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		runtime.LockOSThread()
		return fmt.Errorf("leave namespace %s: %w", n.Name, err)
	}
	return ferr
}

// Listen listens inside the namespace.
func (n *Netns) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.do(func() (err error) { ln, err = net.Listen(network, addr); return err })
	return ln, err
}

// DialContext dials from inside the namespace (an http.Transport's
// DialContext).
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.do(func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, network, addr); return err })
	return c, err
}
