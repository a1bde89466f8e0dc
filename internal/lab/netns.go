package lab

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on a thread that has joined the named network namespace
// (/run/netns/NAME). A socket fn opens stays in that namespace after the
// thread returns to its own: that is how a test, or a lab daemon, listens
// inside the lab without a helper process.
func InNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("join network namespace %s: %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// this thread stays in the lab: keep it locked, so it dies with
		// its goroutine and no other goroutine runs in the wrong namespace
		return fmt.Errorf("leave network namespace %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// ListenIn opens a listener inside the named network namespace.
func ListenIn(netns, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := InNetns(netns, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}
