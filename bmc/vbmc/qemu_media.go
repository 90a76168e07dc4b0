package vbmc

import (
	"context"
	"fmt"
)

// The QEMU node's virtual CD (QEMUConfig.VirtualMedia): an IDE CD drive
// (cdID) that is empty at start unless an image was inserted while the
// machine was off; while it runs, QMP changes and ejects the medium.
const cdID = "cd0"

// cdArgs are QEMU's arguments for the CD drive; it is the first boot
// device for a boot from the CD (SeaBIOS and OVMF both honour bootindex).
func (q *QEMU) cdArgs(dev string) []string {
	if !q.cfg.VirtualMedia {
		return nil
	}
	drive := "if=none,id=" + cdID + "-drive,media=cdrom,readonly=on"
	if q.media != "" {
		drive += ",format=raw,file=" + q.media
	}
	cd := "ide-cd,drive=" + cdID + "-drive,id=" + cdID + ",bus=ide.1"
	if dev == BootCDROM {
		cd += ",bootindex=0"
	}
	return []string{"-drive", drive, "-device", cd}
}

// HasMedia implements MediaBackend.
func (q *QEMU) HasMedia() bool { return q.cfg.VirtualMedia }

// MediaDir implements MediaBackend: the node's state dir.
func (q *QEMU) MediaDir() string { return q.cfg.StateDir }

// InsertMedia implements MediaBackend.
func (q *QEMU) InsertMedia(ctx context.Context, file string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running() {
		if _, err := q.qmpArgs(ctx, "blockdev-change-medium", map[string]any{
			"id": cdID, "filename": file, "format": "raw", "read-only-mode": "read-only"}); err != nil {
			return fmt.Errorf("qemu: insert %s: %w", file, err)
		}
	}
	q.media = file
	return nil
}

// EjectMedia implements MediaBackend. force: the guest may have locked
// the tray (Linux does while the disc is mounted).
func (q *QEMU) EjectMedia(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running() && q.media != "" {
		if _, err := q.qmpArgs(ctx, "eject", map[string]any{"id": cdID, "force": true}); err != nil {
			return fmt.Errorf("qemu: eject: %w", err)
		}
	}
	q.media = ""
	return nil
}

// qmpArgs runs one QMP command with arguments on the running process.
func (q *QEMU) qmpArgs(ctx context.Context, command string, args any) ([]byte, error) {
	return QMP(ctx, q.QMPSocket(), command, args)
}
