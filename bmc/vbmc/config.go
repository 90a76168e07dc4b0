package vbmc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
)

// Config is anvil-vbmc's configuration file (JSON).
//
//	{"listen": "127.0.0.1:8000", "username": "admin", "password": "password",
//	 "nodes": [{"name": "node-1"},
//	           {"name": "node-2", "backend": "qemu", "qemu": {"state_dir": "node-2", "memory_mib": 512,
//	            "disks": [{"path": "nvme0.raw", "size_mib": 1024, "serial": "SN-0001"},
//	                      {"path": "sata0.raw", "serial": "SN-0002", "bus": "ahci"}],
//	            "nic": {"hostfwd": ["tcp:127.0.0.1:19999-:9999"]}}}]}
type Config struct {
	Listen   string       `json:"listen,omitempty"`
	Username string       `json:"username,omitempty"`
	Password string       `json:"password,omitempty"`
	Nodes    []NodeConfig `json:"nodes"`
}

// NodeConfig describes one virtual node.
type NodeConfig struct {
	Name string `json:"name"`
	// Backend is "memory" (default) or "qemu".
	Backend string      `json:"backend,omitempty"`
	QEMU    *QEMUConfig `json:"qemu,omitempty"`
	// Quirks copy vendor behaviours (bios.go).
	Quirks Quirks `json:"quirks,omitempty"`
}

var nodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// LoadConfig reads a config file. Relative QEMU state dirs are resolved
// against the file's directory.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	base := filepath.Dir(path)
	for i := range c.Nodes {
		if q := c.Nodes[i].QEMU; q != nil && q.StateDir != "" && !filepath.IsAbs(q.StateDir) {
			q.StateDir = filepath.Join(base, q.StateDir)
		}
	}
	return c, c.Validate()
}

// Validate checks names, backends and the listen address.
func (c Config) Validate() error {
	var errs []error
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("listen: %w", err))
		}
	}
	seen := map[string]bool{}
	for i, n := range c.Nodes {
		if !nodeName.MatchString(n.Name) {
			errs = append(errs, fmt.Errorf("nodes[%d]: name %q must match %s", i, n.Name, nodeName))
		}
		if seen[n.Name] {
			errs = append(errs, fmt.Errorf("nodes[%d]: duplicate name %q", i, n.Name))
		}
		seen[n.Name] = true
		switch n.Backend {
		case "", "memory":
		case "qemu":
			if n.QEMU == nil || n.QEMU.StateDir == "" {
				errs = append(errs, fmt.Errorf("nodes[%d] (%s): qemu backend needs qemu.state_dir", i, n.Name))
				continue
			}
			if _, err := DiskArgs(n.QEMU.Disks, false); err != nil {
				errs = append(errs, fmt.Errorf("nodes[%d] (%s): %w", i, n.Name, err))
			}
		default:
			errs = append(errs, fmt.Errorf("nodes[%d] (%s): unknown backend %q (memory, qemu)", i, n.Name, n.Backend))
		}
	}
	return errors.Join(errs...)
}

// BuildNodes creates the nodes and their backends. On error, backends
// already created are closed.
func BuildNodes(log *slog.Logger, c Config) ([]*Node, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var nodes []*Node
	for _, nc := range c.Nodes {
		var b Backend = NewMemory()
		if nc.Backend == "qemu" {
			q, err := NewQEMU(log.With("node", nc.Name), *nc.QEMU)
			if err != nil {
				CloseNodes(nodes)
				return nil, fmt.Errorf("node %s: %w", nc.Name, err)
			}
			b = q
		}
		node := NewNode(nc.Name, b)
		node.SetQuirks(nc.Quirks)
		nodes = append(nodes, node)
	}
	return nodes, nil
}

// CloseNodes stops every backend (QEMU processes).
func CloseNodes(nodes []*Node) {
	for _, n := range nodes {
		_ = n.Backend().Close()
	}
}
