package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFindConsoles(t *testing.T) {
	sys := t.TempDir()
	port := func(name, typ string) {
		dir := filepath.Join(sys, "sys", "class", "tty", name)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "type"), []byte(typ+"\n"), 0o444))
	}
	port("ttyS0", "4") // 16550A
	port("ttyS1", "4")
	// console=tty0 console=ttyS0,115200n8: kernel messages on VGA and ttyS0.
	proc := "ttyS0                -W- (EC  p a)    4:64\ntty0                 -WU (E   p  )    4:1\nnetcon0              -W- (    p  )    0:0\n"
	assert.Equal(t, Consoles{Log: []string{"tty0"}, Mirror: []string{"ttyS1"}}, FindConsoles(proc, sys),
		"ttyS1 exists but is no kernel console: it gets the kernel log and the agent's")

	// One serial port, as in QEMU by default: ttyS1 has no UART (type 0).
	port("ttyS1", "0")
	assert.Equal(t, Consoles{Log: []string{"tty0"}}, FindConsoles(proc, sys))

	// console=ttyS1 (the kernel console) and /dev/console on ttyS1.
	port("ttyS1", "4")
	assert.Equal(t, Consoles{Mirror: []string{"ttyS0"}}, FindConsoles("ttyS1 -W- (EC p a) 4:65\n", sys))
	assert.Equal(t, Consoles{}, FindConsoles("garbage\n../../x (E) 1:1\n", filepath.Join(sys, "none")))
}

func TestKmsgLine(t *testing.T) {
	for rec, want := range map[string]string{
		"6,339,5140900,-;NET: Registered PF_INET6 protocol family\n":                          "[    5.140900] NET: Registered PF_INET6 protocol family\n",
		"3,1234,123456789012,-;e1000e 0000:00:02.0: failed\n SUBSYSTEM=pci\n DEVICE=+pci:0\n": "[123456.789012] e1000e 0000:00:02.0: failed\n",
		"4,0,0,c;x":    "[    0.000000] x\n",
		"no separator": "",
		"6,1;short":    "",
		"6,1,abc,-;x":  "",
	} {
		got, ok := kmsgLine(rec)
		assert.Equal(t, want != "", ok, rec)
		assert.Equal(t, want, got, rec)
	}
}

// CopyKmsg against a file standing in for /dev/kmsg (one record per read).
func TestCopyKmsg(t *testing.T) {
	dir := t.TempDir()
	kmsg := filepath.Join(dir, "kmsg")
	require.NoError(t, os.WriteFile(kmsg, []byte("6,1,1500000,-;hello from the kernel\n"), 0o644))
	var out strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := CopyKmsg(ctx, kmsg, &out)
	assert.ErrorContains(t, err, "kernel log", "a plain file ends with EOF")
	assert.Equal(t, "[    1.500000] hello from the kernel\n", out.String())
}

type blockingWriter struct {
	mu      sync.Mutex
	release chan struct{}
	got     []string
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, string(p))
	return len(p), nil
}

func TestAsyncWriterNeverBlocks(t *testing.T) {
	b := &blockingWriter{release: make(chan struct{})}
	w := NewAsyncWriter(b, 2)
	done := make(chan struct{})
	go func() {
		for i := 0; i < 100; i++ {
			n, err := w.Write([]byte("line\n"))
			assert.Equal(t, 5, n)
			assert.NoError(t, err)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Write blocked on a stalled console")
	}
	close(b.release)
	assert.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.got) >= 2 }, 5*time.Second, 10*time.Millisecond)
	b.mu.Lock()
	assert.LessOrEqual(t, len(b.got), 3, "what did not fit was dropped")
	b.mu.Unlock()
}
