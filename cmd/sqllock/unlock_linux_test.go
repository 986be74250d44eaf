package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// On a terminal, unlock shows the holder and asks: "y" breaks the lock,
// anything else leaves it alone and exits 1.
func TestUnlockAsks(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if _, code := b.runToken(t, "asked", "--min-hold", "1h"); code != 0 {
			t.Fatalf("run --min-hold 1h: exit %d", code)
		}
		answer := func(reply string) (string, int) {
			t.Helper()
			master, slavePath := openPTY(t)
			slave, err := os.OpenFile(slavePath, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			c := b.cmd(t, "unlock", "asked")
			c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			slave.Close()
			var out bytes.Buffer
			buf := make([]byte, 4096)
			for !strings.Contains(out.String(), "[y/N] ") {
				n, err := master.Read(buf)
				out.Write(buf[:n])
				if err != nil {
					t.Fatalf("no question: %v\n%s", err, out.String())
				}
			}
			if _, err := io.WriteString(master, reply+"\n"); err != nil {
				t.Fatal(err)
			}
			code := exitStatus(c.Wait())
			rest, _ := io.ReadAll(master) // EIO once unlock has exited
			return out.String() + string(rest), code
		}
		out, code := answer("n")
		if code != exitFailure || !strings.Contains(out, "--min-hold") {
			t.Fatalf("answer n: exit %d, output %q; want 1 after showing the minimum hold", code, out)
		}
		if _, code := b.runToken(t, "asked", "-n"); code != exitNotAcquired {
			t.Fatalf("run -n after answering n: exit %d, want 75", code)
		}
		if out, code := answer("y"); code != 0 || !strings.Contains(out, "broke lock") {
			t.Fatalf("answer y: exit %d, output %q; want 0 and the lease broken", code, out)
		}
		if _, code := b.runToken(t, "asked", "-n"); code != 0 {
			t.Fatalf("run -n after unlock: exit %d, want 0", code)
		}
	})
}
