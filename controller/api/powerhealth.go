package api

// The node fields disable_power_off (1.95) and health (1.109). The
// behaviour behind them is the conductor's (powerOff, power sync); here
// are only their versions.

const (
	// disablePowerOffVersion: the node is never powered off; set on
	// create or PATCH, refused below it (406) as any newer field.
	disablePowerOffVersion = 95
	// healthVersion: the health the BMC reports (OK, Warning, Critical or
	// null), read with power sync; read-only.
	healthVersion = 109
)
