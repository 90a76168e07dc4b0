package agent

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// SystemPower powers the machine off or restarts it through the kernel,
// after flushing filesystems. It is only for the ramdisk: on a workstation
// it would switch the workstation off (main leaves Power nil there, which fails power commands).
type SystemPower struct{}

var _ Power = SystemPower{}

// PowerOff implements Power.
func (SystemPower) PowerOff(context.Context) error {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		return fmt.Errorf("power off: %w", err)
	}
	return nil
}

// Reboot implements Power.
func (SystemPower) Reboot(context.Context) error {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		return fmt.Errorf("reboot: %w", err)
	}
	return nil
}
