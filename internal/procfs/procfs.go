// Package procfs lists processes from /proc. The benchmark's PostgreSQL
// figures and the Ironic test server both walk the process table to find a
// server's processes; they shared a copy of the parsing of
// /proc/[pid]/stat, whose command name may hold spaces and parentheses.
package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Process is one entry of the process table.
type Process struct {
	PID, PPID, PGrp int
}

// List reads the process table under root (normally "/proc"). Processes
// that end while it reads are left out.
func List(root string) ([]Process, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("read the process table: %w", err)
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue // it ended
		}
		p, ok := parseStat(pid, string(stat))
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseStat reads ppid and pgrp from a /proc/[pid]/stat line: after the
// command name, which is in parentheses and may hold both spaces and
// parentheses itself, come state, ppid, pgrp.
func parseStat(pid int, stat string) (Process, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return Process{}, false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 3 {
		return Process{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return Process{}, false
	}
	return Process{PID: pid, PPID: ppid, PGrp: pgrp}, true
}

// Cmdline is the process's arguments, or nil if it ended.
func Cmdline(root string, pid int) []string {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}
