package bmc

// Redfish's graceful restart, the soft reboot of Ironic's redfish power
// interface (sushy RESET_GRACEFUL_RESTART): bmclib v2.3.0 has no such
// power state, so it is the system's ComputerSystem.Reset through gofish.

import (
	"context"
	"slices"

	"github.com/stmcginnis/gofish/redfish"
)

// gracefulRestart implements restarter. The transport narrows Systems to
// the target's system, so the collection has that one member.
func (s *redfishSession) gracefulRestart(ctx context.Context) (bool, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return false, s.classify(ctx, err)
	}
	systems, err := c.Service.Systems()
	if err != nil {
		return false, s.classify(ctx, err)
	}
	if len(systems) != 1 || !slices.Contains(systems[0].SupportedResetTypes, redfish.GracefulRestartResetType) {
		return false, nil
	}
	if err := systems[0].Reset(redfish.GracefulRestartResetType); err != nil {
		return true, s.classify(ctx, &bmclibError{msg: "GracefulRestart: " + redfishMessages(err), cause: err})
	}
	return true, nil
}
