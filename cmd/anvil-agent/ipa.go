package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/agent"
	"github.com/anvil-metal/anvil/agent/ipa"
	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/generic"
)

// ipaConfig turns IPA's kernel arguments into the adapter's configuration.
func ipaConfig(o options) (ipa.Config, error) {
	a := o.ipaArgs
	cfg := ipa.Config{API: a.APIURL, AdvertiseHost: a.AdvertiseHost, Insecure: a.Insecure, Fingerprint: o.apiPin,
		GlobalRequestID: a.GlobalRequestID, BootIF: o.bootIF, NodeUUID: o.node}
	if a.AdvertisePort != "" {
		p, err := strconv.Atoi(a.AdvertisePort)
		if err != nil || p < 1 || p > 65535 {
			return cfg, fmt.Errorf("ipa-advertise-port=%q: want a port number", a.AdvertisePort)
		}
		cfg.AdvertisePort = p
	}
	port := strconv.Itoa(ipa.DefaultPort)
	if a.ListenPort != "" {
		p, err := strconv.Atoi(a.ListenPort)
		if err != nil || p < 1 || p > 65535 {
			return cfg, fmt.Errorf("ipa-listen-port=%q: want a port number", a.ListenPort)
		}
		port = a.ListenPort
	}
	host := a.ListenHost
	if host == "::" || host == "0.0.0.0" {
		host = "" // every address, both families
	}
	cfg.ListenAddr = net.JoinHostPort(host, port)
	return cfg, nil
}

// runIPA runs the agent for a stock Ironic: the same hardware managers,
// guard and powers, behind ironic-python-agent's protocol.
func runIPA(ctx context.Context, o options, env hardware.Environment, powers bool, why string, guard *hardware.Guard, log *slog.Logger, stderr io.Writer) int {
	cfg, err := ipaConfig(o)
	if err == nil {
		_, err = ipa.NewClient(cfg, agent.Version)
	}
	if err != nil {
		if !env.InRamdisk {
			fmt.Fprintln(stderr, "anvil-agent:", err)
			return 2
		}
		stayUp(ctx, log, "bad ironic-python-agent arguments on the kernel command line", err)
		return 0
	}
	log.Info("ironic-python-agent mode: Ironic drives this agent through IPA's API",
		"api", cfg.API, "listen", cfg.ListenAddr, "advertise_host", cfg.AdvertiseHost, "advertise_port", cfg.AdvertisePort)
	root := o.root
	a := &ipa.Agent{
		Config:  cfg,
		Network: network(o, powers, log),
		Hardware: func(ctx context.Context, node map[string]any) (ipa.Hardware, error) {
			c := generic.Config{Root: root, Guard: guard, Logger: log}
			if props, ok := node["properties"].(map[string]any); ok {
				if hints, ok := props["root_device"].(map[string]any); ok {
					c.RootDeviceHints = hints
				}
			}
			d, err := hardware.NewDispatcher(ctx, generic.New(c))
			if err != nil {
				return nil, fmt.Errorf("hardware managers: %w", err)
			}
			return d, nil
		},
		Logs:    agent.SystemLogs{LogFile: o.logFile, Kmsg: "/dev/kmsg"},
		Sync:    unix.Sync,
		Log:     log,
		Version: agent.Version,
	}
	if powers {
		a.Power = agent.SystemPower{}
	} else {
		log.Warn("power_off and run_image commands will fail", "reason", why)
	}
	runForever(ctx, a.Run, log)
	log.Info("shutting down")
	return 0
}
