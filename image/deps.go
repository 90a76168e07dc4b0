//go:build tools

// Keeps the u-root commands the image builds (DefaultCommands) in the module
// graph, so `go mod tidy` keeps their requirements and go.sum entries.
package image

import (
	_ "github.com/u-root/u-root/cmds/core/cat"
	_ "github.com/u-root/u-root/cmds/core/dd"
	_ "github.com/u-root/u-root/cmds/core/dhclient"
	_ "github.com/u-root/u-root/cmds/core/dmesg"
	_ "github.com/u-root/u-root/cmds/core/echo"
	_ "github.com/u-root/u-root/cmds/core/free"
	_ "github.com/u-root/u-root/cmds/core/gosh"
	_ "github.com/u-root/u-root/cmds/core/init"
	_ "github.com/u-root/u-root/cmds/core/insmod"
	_ "github.com/u-root/u-root/cmds/core/ip"
	_ "github.com/u-root/u-root/cmds/core/ls"
	_ "github.com/u-root/u-root/cmds/core/lsmod"
	_ "github.com/u-root/u-root/cmds/core/mount"
	_ "github.com/u-root/u-root/cmds/core/ps"
	_ "github.com/u-root/u-root/cmds/core/rmmod"
	_ "github.com/u-root/u-root/cmds/core/shutdown"
	_ "github.com/u-root/u-root/cmds/core/sleep"
	_ "github.com/u-root/u-root/cmds/core/uname"
)
