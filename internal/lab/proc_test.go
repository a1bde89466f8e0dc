package lab

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloseInherited: a descriptor inherited without close-on-exec (a
// caller's lock) gets it, so no daemon the lab starts keeps the lock.
func TestCloseInherited(t *testing.T) {
	fd, err := syscall.Open(t.TempDir()+"/lock", syscall.O_CREAT|syscall.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
		t.Fatal("the test's descriptor is already close-on-exec")
	}
	closeInherited()
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
		t.Error("an inherited descriptor is still passed to the lab's daemons")
	}
}
