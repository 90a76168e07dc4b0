package image

import (
	"bytes"
	"testing"
)

func TestBootSectorDisk(t *testing.T) {
	img := BootSectorDisk("HELLO", 1<<20)
	if len(img) != 1<<20 || img[510] != 0x55 || img[511] != 0xAA {
		t.Fatalf("not a 1 MiB disk with an MBR signature")
	}
	// the code loads the message from 0x7c16, i.e. offset 22 of the sector
	if !bytes.HasPrefix(img[22:], []byte("HELLO\r\n\x00")) {
		t.Fatalf("message not at offset 22: %q", img[22:32])
	}
	if got := BootSectorDisk(string(bytes.Repeat([]byte("x"), 600)), 0); len(got) != 512 || got[510] != 0x55 {
		t.Fatalf("an overlong message must not overwrite the signature")
	}
}
