package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/hardware/generic"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cleanStep(id, step string) *protocol.Command {
	return &protocol.Command{ID: id, Name: protocol.CmdExecuteCleanStep,
		Step: &protocol.Step{Interface: protocol.InterfaceDeploy, Step: step, Priority: 10}}
}

func TestLookupRetriesUntilFoundThenHeartbeatsWithCatalogue(t *testing.T) {
	ctrl := newFakeController(t)
	ctrl.set(func(f *fakeController) {
		f.lookupStatus = []int{http.StatusNotFound, http.StatusNotFound, http.StatusConflict, http.StatusServiceUnavailable}
	})
	h := startAgent(t, ctrl, nil)

	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 3 }, waitFor, poll)
	assert.Equal(t, 5, ctrl.lookupCount(), "404, 404, 409, 503, then found")
	ctrl.mu.Lock()
	first := ctrl.lookups[0]
	assert.Empty(t, ctrl.badQueries)
	ctrl.mu.Unlock()
	assert.Equal(t, "52:54:00:12:34:56", first.URL.Query().Get("addresses"))
	assert.Equal(t, UserAgent(Version), first.Header.Get("User-Agent"))
	assert.Equal(t, "anvil-agent/0.1.0 (anvil/1)", first.Header.Get("User-Agent"))
	bootID := first.URL.Query().Get("boot_id")
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, bootID)
	assert.Contains(t, h.logs.String(), "no node expects an agent with these MAC addresses yet")

	hbs := ctrl.hbs()
	hb := hbs[0]
	assert.Equal(t, bootID, hb.BootID)
	assert.Equal(t, "anvil-agent 0.1.0 (anvil/1)", hb.AgentVersion)
	require.NotNil(t, hb.Steps, "first heartbeat of a boot carries the catalogue")
	fp := h.disp.Fingerprint(context.Background())
	assert.Equal(t, fp, hb.Fingerprint)
	assert.Equal(t, fp, hb.Steps.Fingerprint)
	assert.Equal(t, []protocol.ManagerVersion{{Name: "test_manager", Version: "1.0"}}, hb.Steps.Managers)
	assert.Len(t, hb.Steps.Clean, 5)
	assert.Len(t, hb.Steps.Deploy, 1)
	var phases []string
	last := 0.0
	for _, p := range hb.BootTimings {
		phases = append(phases, p.Phase)
		assert.GreaterOrEqual(t, p.Seconds, last, "phases are in boot order")
		last = p.Seconds
	}
	assert.Equal(t, []string{"kernel", "network", "lookup", "heartbeat"}, phases)
	assert.InDelta(t, 1.5, hb.BootTimings[0].Seconds, 0.001, "kernel phase is the uptime at agent start")

	for _, later := range hbs[1:] {
		assert.Nil(t, later.Steps, "steps only on the first heartbeat unless asked")
		assert.Empty(t, later.BootTimings, "timings only until delivered")
		assert.Equal(t, fp, later.Fingerprint, "fingerprint on every heartbeat")
		assert.Equal(t, bootID, later.BootID)
	}

	// The controller asks for the steps again.
	ctrl.set(func(f *fakeController) { f.sendSteps = true })
	n := len(ctrl.hbs())
	require.Eventually(t, func() bool {
		hbs := ctrl.hbs()
		return len(hbs) > n+1 && hbs[len(hbs)-1].Steps != nil
	}, waitFor, poll)
}

func TestCommandRunsInBackgroundWithProgressUntilAcked(t *testing.T) {
	ctrl := newFakeController(t)
	ctrl.set(func(f *fakeController) { f.autoAck = false })
	h := startAgent(t, ctrl, nil)
	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 1 }, waitFor, poll)

	ctrl.send(cleanStep("c1", "erase_devices"), false)
	<-h.step.started
	// Heartbeats keep coming while the step blocks, carrying its progress.
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range ctrl.statusOf("c1") {
			if s.State == protocol.CommandRunning && s.Progress != nil {
				n++
			}
		}
		return n >= 3
	}, waitFor, poll)
	running := ctrl.statusOf("c1")[0]
	assert.Equal(t, protocol.CmdExecuteCleanStep, running.Name)
	require.NotNil(t, running.Progress)
	assert.Equal(t, protocol.Progress{Percent: 42.5, Message: "erasing /dev/nvme0n1", Device: "/dev/nvme0n1", BytesDone: 425, BytesTotal: 1000}, *running.Progress)
	assert.False(t, running.StartedAt.IsZero())

	close(h.step.release)
	// The final status is repeated until acknowledged.
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range ctrl.statusOf("c1") {
			if s.State == protocol.CommandSucceeded {
				n++
			}
		}
		return n >= 3
	}, waitFor, poll)
	final := ctrl.finalOf("c1")
	assert.JSONEq(t, `{"erased":["/dev/nvme0n1"]}`, string(final.Result))
	assert.Equal(t, "erased /dev/nvme0n1", final.Summary, "the result's own summary travels with it")
	assert.Nil(t, final.Error)
	require.NotNil(t, final.FinishedAt)

	ctrl.set(func(f *fakeController) { f.ack = "c1" })
	// After the ack reaches the agent, no further heartbeat reports c1.
	var acked int
	require.Eventually(t, func() bool {
		hbs := ctrl.hbs()
		for i := len(hbs) - 1; i >= 0; i-- {
			if hbs[i].Command != nil {
				acked = i
				return len(hbs)-i > 3
			}
		}
		return false
	}, waitFor, poll)
	for _, hb := range ctrl.hbs()[acked+1:] {
		assert.Nil(t, hb.Command)
	}
	assert.Equal(t, []string{"clean:erase_devices"}, h.mgr.Calls())
}

func TestFinishedCommandIsReportedWithoutWaitingForTheInterval(t *testing.T) {
	ctrl := newFakeController(t)
	// With an hour between heartbeats, the only way to see the command's
	// result is a heartbeat sent because it finished.
	ctrl.set(func(f *fakeController) { f.interval = 3600 })
	ctrl.send(cleanStep("c1", "quick"), false)
	startAgent(t, ctrl, nil)
	require.Eventually(t, func() bool { return ctrl.finalOf("c1") != nil }, waitFor, poll)
	assert.Equal(t, protocol.CommandSucceeded, ctrl.finalOf("c1").State)
}

func TestNextCommandIsFetchedSoonAfterAResult(t *testing.T) {
	ctrl := newFakeController(t)
	// A controller that decides the next command only after it recorded
	// the previous result: c2 is handed out only after c1 was acked.
	ctrl.set(func(f *fakeController) {
		f.interval = 3600
		f.onFinalHB = func(s *protocol.CommandStatus) {
			if s.ID == "c1" {
				f.later = cleanStep("c2", "quick")
			}
		}
	})
	ctrl.send(cleanStep("c1", "quick"), false)
	startAgent(t, ctrl, func(a *Agent) { a.FollowUp = 20 * time.Millisecond })
	require.Eventually(t, func() bool { return ctrl.finalOf("c2") != nil }, waitFor, poll)
	assert.Equal(t, protocol.CommandSucceeded, ctrl.finalOf("c2").State)
}

func TestRedeliveredCommandIsNotRerun(t *testing.T) {
	ctrl := newFakeController(t)
	h := startAgent(t, ctrl, nil)
	ctrl.send(cleanStep("c1", "quick"), true) // in every reply, even after the ack
	require.Eventually(t, func() bool { return ctrl.finalOf("c1") != nil }, waitFor, poll)
	n := len(ctrl.hbs())
	require.Eventually(t, func() bool { return len(ctrl.hbs()) > n+5 }, waitFor, poll)
	assert.Equal(t, []string{"clean:quick"}, h.mgr.Calls())
	assert.JSONEq(t, `{"ran":"quick","kind":"clean"}`, string(ctrl.finalOf("c1").Result))
}

func TestSecondCommandWhileBusyIsNotStarted(t *testing.T) {
	ctrl := newFakeController(t)
	h := startAgent(t, ctrl, nil)
	ctrl.send(cleanStep("c1", "erase_devices"), false)
	<-h.step.started
	ctrl.send(cleanStep("c2", "quick"), true)
	require.Eventually(t, func() bool {
		n := 0
		for _, hb := range ctrl.hbs() {
			if hb.Command != nil && hb.Command.ID == "c1" && hb.Command.State == protocol.CommandRunning {
				n++
			}
		}
		return n >= 4
	}, waitFor, poll)
	assert.Equal(t, []string{"clean:erase_devices"}, h.mgr.Calls(), "c2 must not start while c1 runs")
	assert.Empty(t, ctrl.statusOf("c2"))
	assert.Contains(t, h.logs.String(), "agent is busy; ignoring new command")
	assert.Contains(t, h.logs.String(), "command_id=c2")

	// Once c1 is done, the controller's retry of c2 runs. A controller
	// sends the next command only after it has recorded c1's result (a
	// command sent while c1's final is unreported replaces it, by design
	// and with a warning), so the fake stops offering c2 until then.
	ctrl.send(nil, false)
	// A heartbeat after that one means every reply carrying c2 has been
	// handled (while c1 was running).
	seen := len(ctrl.hbs())
	require.Eventually(t, func() bool { return len(ctrl.hbs()) > seen+1 }, waitFor, poll)
	close(h.step.release)
	require.Eventually(t, func() bool { return ctrl.finalOf("c1") != nil }, waitFor, poll)
	assert.Equal(t, protocol.CommandSucceeded, ctrl.finalOf("c1").State)
	ctrl.send(cleanStep("c2", "quick"), true)
	require.Eventually(t, func() bool { return ctrl.finalOf("c2") != nil }, waitFor, poll)
	assert.Equal(t, []string{"clean:erase_devices", "clean:quick"}, h.mgr.Calls())
}

func TestFingerprintMismatchFailsWithoutRunning(t *testing.T) {
	ctrl := newFakeController(t)
	h := startAgent(t, ctrl, nil)
	cmd := cleanStep("c1", "quick")
	cmd.Fingerprint = "sha256:stale"
	ctrl.send(cmd, false)
	require.Eventually(t, func() bool { return ctrl.finalOf("c1") != nil }, waitFor, poll)
	final := ctrl.finalOf("c1")
	assert.Equal(t, protocol.CommandFailed, final.State)
	require.NotNil(t, final.Error)
	assert.Equal(t, protocol.ErrTypeVersionMismatch, final.Error.Type)
	assert.Contains(t, final.Error.Details, "sha256:stale")
	assert.Empty(t, h.mgr.Calls())

	// The current fingerprint runs.
	ok := cleanStep("c2", "quick")
	ok.Fingerprint = h.disp.Fingerprint(context.Background())
	ctrl.send(ok, false)
	require.Eventually(t, func() bool { return ctrl.finalOf("c2") != nil }, waitFor, poll)
	assert.Equal(t, protocol.CommandSucceeded, ctrl.finalOf("c2").State)
	assert.Equal(t, []string{"clean:quick"}, h.mgr.Calls())
}

func TestStepErrorsAreTyped(t *testing.T) {
	tests := []struct {
		name     string
		cmd      *protocol.Command
		wantType string
		wantRes  string
	}{
		{"unknown step", cleanStep("c1", "no_such_step"), protocol.ErrTypeUnknownStep, ""},
		{"manager panics", cleanStep("c1", "explode"), protocol.ErrTypeInternal, ""},
		{"unexpected argument", &protocol.Command{ID: "c1", Name: protocol.CmdExecuteCleanStep,
			Step: &protocol.Step{Interface: protocol.InterfaceDeploy, Step: "quick", Args: map[string]any{"bogus": 1}}}, protocol.ErrTypeInvalidArgs, ""},
		{"required argument missing", &protocol.Command{ID: "c1", Name: protocol.CmdExecuteCleanStep,
			Step: &protocol.Step{Interface: protocol.InterfaceRAID, Step: "create_configuration"}}, protocol.ErrTypeInvalidArgs, ""},
		{"required argument from the node context", &protocol.Command{ID: "c1", Name: protocol.CmdExecuteCleanStep,
			Step: &protocol.Step{Interface: protocol.InterfaceRAID, Step: "create_configuration"},
			Node: map[string]any{"target_raid_config": map[string]any{"logical_disks": []any{}}, "instance_info": map[string]any{}}},
			"", `{"got":{"logical_disks":[]}}`},
		{"node context value unset", &protocol.Command{ID: "c1", Name: protocol.CmdExecuteCleanStep,
			Step: &protocol.Step{Interface: protocol.InterfaceRAID, Step: "create_configuration"},
			Node: map[string]any{"target_raid_config": nil}}, protocol.ErrTypeInvalidArgs, ""},
		{"deploy kind", &protocol.Command{ID: "c1", Name: protocol.CmdExecuteDeployStep,
			Step: &protocol.Step{Interface: protocol.InterfaceDeploy, Step: "write_image"}}, "", `{"ran":"write_image","kind":"deploy"}`},
		{"clean step asked as deploy", &protocol.Command{ID: "c1", Name: protocol.CmdExecuteDeployStep,
			Step: &protocol.Step{Interface: protocol.InterfaceDeploy, Step: "quick"}}, protocol.ErrTypeUnknownStep, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctrl := newFakeController(t)
			startAgent(t, ctrl, nil)
			ctrl.send(tt.cmd, false)
			require.Eventually(t, func() bool { return ctrl.finalOf("c1") != nil }, waitFor, poll)
			final := ctrl.finalOf("c1")
			if tt.wantType == "" {
				require.Equal(t, protocol.CommandSucceeded, final.State, "%+v", final.Error)
				assert.JSONEq(t, tt.wantRes, string(final.Result))
				return
			}
			assert.Equal(t, protocol.CommandFailed, final.State)
			require.NotNil(t, final.Error)
			assert.Equal(t, tt.wantType, final.Error.Type, final.Error.Message)
			// The agent survives and keeps heartbeating.
			n := len(ctrl.hbs())
			require.Eventually(t, func() bool { return len(ctrl.hbs()) > n+2 }, waitFor, poll)
		})
	}
}

func TestFailedStepReportsItsPartialResult(t *testing.T) {
	ctrl := newFakeController(t)
	startAgent(t, ctrl, nil)
	ctrl.send(cleanStep("c1", "erase_partly"), false)
	require.Eventually(t, func() bool { return ctrl.finalOf("c1") != nil }, waitFor, poll)
	// Every report of the failure (the fake controller decodes and
	// validates each heartbeat) carries the error and the partial result.
	for _, final := range ctrl.statusOf("c1") {
		if final.State == protocol.CommandRunning {
			continue
		}
		assert.Equal(t, protocol.CommandFailed, final.State)
		require.NotNil(t, final.Error)
		assert.Equal(t, protocol.Error{Type: protocol.ErrTypeBlockDeviceErase, Code: 500,
			Message: "1 of 2 devices were not erased", Details: "/dev/sdb: verify: byte 123 is 0x5a, want 0x00"}, *final.Error)
		assert.Equal(t, "/dev/sda erased by overwrite, verified (64 MB, 1.2 s); /dev/sdb failed: verify: byte 123 is 0x5a, want 0x00",
			final.Summary, "the partial result's own summary")
		var got erase.Result
		require.NoError(t, json.Unmarshal(final.Result, &got), "%s", final.Result)
		assert.Equal(t, partialErase(), got, "the plan and each device's outcome")
		require.NotNil(t, final.FinishedAt)
	}
}

type panickySummary struct{ N int }

func (panickySummary) Summary() string { panic("summary bug") }

type valueSummary struct{ Devices []string }

func (v valueSummary) Summary() string { return strings.Join(v.Devices, ", ") }

func TestDescribeResult(t *testing.T) {
	raw, sum, err := describe(nil)
	assert.NoError(t, err)
	assert.Nil(t, raw)
	assert.Empty(t, sum)

	// A nil pointer to a result type: no result, and no panic from its
	// value-receiver Summary.
	raw, sum, err = describe((*valueSummary)(nil))
	assert.NoError(t, err)
	assert.Nil(t, raw)
	assert.Empty(t, sum)

	raw, sum, err = describe(&valueSummary{Devices: []string{"/dev/sda"}})
	assert.NoError(t, err)
	assert.JSONEq(t, `{"Devices":["/dev/sda"]}`, string(raw))
	assert.Equal(t, "/dev/sda", sum)

	long := valueSummary{Devices: []string{strings.Repeat("é", protocol.MaxSummary)}}
	_, sum, err = describe(long)
	assert.NoError(t, err)
	assert.LessOrEqual(t, len(sum), protocol.MaxSummary, "bounded as the protocol requires")

	_, _, err = describe(panickySummary{})
	assert.ErrorContains(t, err, "summary bug", "a result type's bug is an error, not a crash")

	_, _, err = describe(map[string]any{"c": make(chan int)})
	assert.Error(t, err, "a result that does not encode")
}

func TestRefusedHeartbeatLooksUpAgainWithNewToken(t *testing.T) {
	tests := []struct {
		name   string
		refuse func(f *fakeController)
		accept func(f *fakeController)
	}{
		{"token wiped (401)", func(f *fakeController) { f.token = "" }, func(*fakeController) {}},
		{"forbidden (403)", func(f *fakeController) { f.hbStatus = http.StatusForbidden }, func(f *fakeController) { f.hbStatus = 0 }},
		{"node gone (404)", func(f *fakeController) { f.hbStatus = http.StatusNotFound }, func(f *fakeController) { f.hbStatus = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctrl := newFakeController(t)
			h := startAgent(t, ctrl, nil)
			require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 2 }, waitFor, poll)
			first := ctrl.hbs()[0]
			assert.Equal(t, 1, ctrl.lookupCount())

			ctrl.set(tt.refuse)
			require.Eventually(t, func() bool { return ctrl.lookupCount() >= 2 }, waitFor, poll)
			ctrl.set(tt.accept)
			var second *protocol.Heartbeat
			require.Eventually(t, func() bool {
				hbs := ctrl.hbs()
				ctrl.mu.Lock()
				defer ctrl.mu.Unlock()
				last := hbs[len(hbs)-1]
				if last.AgentToken == ctrl.token && last.AgentToken != first.AgentToken {
					second = last
					return true
				}
				return false
			}, waitFor, poll)
			assert.Equal(t, first.BootID, second.BootID, "same boot, new protocol session")
			// The first accepted heartbeat of the new session carries the
			// catalogue again.
			var sawSteps bool
			for _, hb := range ctrl.hbs() {
				if hb.AgentToken != first.AgentToken && hb.Steps != nil {
					sawSteps = true
				}
			}
			assert.True(t, sawSteps)
			assert.Contains(t, h.logs.String(), "looking the node up again")
		})
	}
}

func TestControllerDownThenBack(t *testing.T) {
	ctrl := newFakeController(t)
	h := startAgent(t, ctrl, nil)
	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 2 }, waitFor, poll)

	ctrl.stop()
	// The agent keeps trying (and logs it) instead of exiting.
	require.Eventually(t, func() bool {
		return bytes.Count([]byte(h.logs.String()), []byte("heartbeat failed; retrying")) >= 3
	}, waitFor, poll)
	select {
	case err := <-h.done:
		t.Fatalf("agent exited while the controller was down: %v", err)
	default:
	}
	n := len(ctrl.hbs())
	ctrl.restart()
	require.Eventually(t, func() bool { return len(ctrl.hbs()) > n+2 }, waitFor, poll)
	assert.Equal(t, 1, ctrl.lookupCount(), "the token is still valid: no new lookup")
}

func TestBadRequestIsLoggedAndRetried(t *testing.T) {
	ctrl := newFakeController(t)
	ctrl.set(func(f *fakeController) {
		f.hbStatus, f.hbBody = http.StatusBadRequest, "Agent did not transmit a version"
	})
	h := startAgent(t, ctrl, nil)
	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 3 }, waitFor, poll)
	assert.Contains(t, h.logs.String(), "Agent did not transmit a version", "the faultstring is logged")
	for _, hb := range ctrl.hbs() {
		assert.NotNil(t, hb.Steps, "steps were never accepted, so every retry carries them")
		assert.NotEmpty(t, hb.BootTimings)
	}
	ctrl.set(func(f *fakeController) { f.hbStatus = 0 })
	n := len(ctrl.hbs())
	require.Eventually(t, func() bool { return len(ctrl.hbs()) > n+2 }, waitFor, poll)
	hbs := ctrl.hbs()
	assert.Nil(t, hbs[len(hbs)-1].Steps)
	assert.Equal(t, 1, ctrl.lookupCount())
}

func TestPowerCommandIsReportedBeforeActing(t *testing.T) {
	for _, name := range []string{protocol.CmdPowerOff, protocol.CmdReboot} {
		t.Run(name, func(t *testing.T) {
			var events []string
			power := &fakePower{events: &events, calls: make(chan string, 1)}
			ctrl := newFakeController(t)
			ctrl.set(func(f *fakeController) {
				f.onFinalHB = func(s *protocol.CommandStatus) {
					power.mu.Lock()
					defer power.mu.Unlock()
					events = append(events, "reported:"+s.Name+":"+s.State)
				}
			})
			startAgent(t, ctrl, func(a *Agent) { a.Power = power })
			ctrl.send(&protocol.Command{ID: "p1", Name: name}, false)
			select {
			case got := <-power.calls:
				assert.Equal(t, name, got)
			case <-time.After(waitFor):
				t.Fatal("power function not called")
			}
			power.mu.Lock()
			defer power.mu.Unlock()
			require.GreaterOrEqual(t, len(events), 2)
			assert.Equal(t, []string{"reported:" + name + ":SUCCEEDED", "power:" + name}, events[:2])
		})
	}
}

func TestPowerWithoutPowerControlFails(t *testing.T) {
	ctrl := newFakeController(t)
	startAgent(t, ctrl, nil)
	ctrl.send(&protocol.Command{ID: "p1", Name: protocol.CmdPowerOff}, false)
	require.Eventually(t, func() bool { return ctrl.finalOf("p1") != nil }, waitFor, poll)
	final := ctrl.finalOf("p1")
	assert.Equal(t, protocol.CommandFailed, final.State)
	assert.Equal(t, protocol.ErrTypeNotSupported, final.Error.Type)
}

func TestPowerActsAfterGraceWhenControllerIsGone(t *testing.T) {
	var events []string
	power := &fakePower{events: &events, calls: make(chan string, 1)}
	ctrl := newFakeController(t)
	ctrl.set(func(f *fakeController) { f.failAfterSend = http.StatusServiceUnavailable })
	ctrl.send(&protocol.Command{ID: "p1", Name: protocol.CmdPowerOff}, false)
	h := startAgent(t, ctrl, func(a *Agent) { a.Power = power; a.PowerGrace = 50 * time.Millisecond })
	select {
	case got := <-power.calls:
		assert.Equal(t, protocol.CmdPowerOff, got)
	case <-time.After(waitFor):
		t.Fatal("power function not called after the grace period")
	}
	assert.Contains(t, h.logs.String(), "acting on the power command without confirming its report")
	require.NotNil(t, ctrl.finalOf("p1"), "the agent did try to report it")
}

func TestGetStepsInventoryAndLogs(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "agent.log")
	require.NoError(t, os.WriteFile(logFile, []byte("level=INFO msg=\"agent starting\"\n"), 0o644))
	dmesg := filepath.Join(dir, "dmesg")
	require.NoError(t, os.WriteFile(dmesg, []byte("#!/bin/sh\necho '[    0.000000] Linux version 6.6.0'\n"), 0o755))
	ctrl := newFakeController(t)
	h := startAgent(t, ctrl, func(a *Agent) {
		a.Inventory = func(ctx context.Context) (protocol.Inventory, error) {
			return protocol.Inventory{Hostname: "node-1", Disks: []protocol.Disk{{Name: "/dev/nvme0n1", Size: 1 << 40}}}, nil
		}
		a.Logs = SystemLogs{LogFile: logFile, Dmesg: dmesg}
	})

	ctrl.send(&protocol.Command{ID: "s1", Name: protocol.CmdGetSteps}, false)
	require.Eventually(t, func() bool { return ctrl.finalOf("s1") != nil }, waitFor, poll)
	var cat protocol.StepCatalogue
	require.NoError(t, json.Unmarshal(ctrl.finalOf("s1").Result, &cat))
	assert.Equal(t, h.disp.Fingerprint(context.Background()), cat.Fingerprint)
	require.NoError(t, cat.Validate())
	assert.Len(t, cat.Clean, 5)

	ctrl.send(&protocol.Command{ID: "i1", Name: protocol.CmdInventory}, false)
	require.Eventually(t, func() bool { return ctrl.finalOf("i1") != nil }, waitFor, poll)
	var inv protocol.Inventory
	require.NoError(t, json.Unmarshal(ctrl.finalOf("i1").Result, &inv))
	assert.Equal(t, "node-1", inv.Hostname)
	assert.Equal(t, "/dev/nvme0n1", inv.Disks[0].Name)

	ctrl.send(&protocol.Command{ID: "l1", Name: protocol.CmdCollectLogs}, false)
	require.Eventually(t, func() bool { return ctrl.finalOf("l1") != nil }, waitFor, poll)
	final := ctrl.finalOf("l1")
	require.Equal(t, protocol.CommandSucceeded, final.State, "%+v", final.Error)
	var res map[string]string
	require.NoError(t, json.Unmarshal(final.Result, &res))
	files := untar(t, res["system_logs"])
	assert.Contains(t, files["anvil-agent.log"], "agent starting")
	assert.Contains(t, files["dmesg.txt"], "Linux version 6.6.0")
}

// untar decodes a base64 gzip tar into name → content.
func untar(t *testing.T, b64 string) map[string]string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		out[hdr.Name] = string(b)
	}
}

// TestEraseRefusedOutsideRamdisk wires the real generic manager with the
// guard main builds on a workstation (no ramdisk, no allow-list): the
// destructive step must fail with a ProtectedDevice error, not run.
func TestEraseRefusedOutsideRamdisk(t *testing.T) {
	root, err := filepath.Abs("../testdata/hardware/nvme-sata")
	require.NoError(t, err)
	env := hardware.DetectEnvironment("../testdata/hardware/procfs/installed-ext4", 4242)
	require.False(t, env.InRamdisk)
	guard := hardware.NewGuard(env, nil)
	disp, err := hardware.NewDispatcher(context.Background(), generic.New(generic.Config{Root: root, Guard: guard}))
	require.NoError(t, err)
	ctrl := newFakeController(t)
	startAgent(t, ctrl, func(a *Agent) { a.Hardware = StaticHardware(disp) })

	cmd := cleanStep("e1", "erase_devices_metadata")
	cmd.Step.Priority = 99
	cmd.Fingerprint = disp.Fingerprint(context.Background())
	ctrl.send(cmd, false)
	require.Eventually(t, func() bool { return ctrl.finalOf("e1") != nil }, waitFor, poll)
	final := ctrl.finalOf("e1")
	assert.Equal(t, protocol.CommandFailed, final.State)
	require.NotNil(t, final.Error)
	assert.Equal(t, protocol.ErrTypeProtectedDevice, final.Error.Type)
	assert.Contains(t, final.Error.Message, "not running in the agent ramdisk")
}

func TestAgentStopsOnCancelWhileLookupFails(t *testing.T) {
	ctrl := newFakeController(t)
	ctrl.set(func(f *fakeController) { f.lookupStatus = make([]int, 1000); fill(f.lookupStatus, http.StatusNotFound) })
	h := startAgent(t, ctrl, nil)
	require.Eventually(t, func() bool { return ctrl.lookupCount() >= 3 }, waitFor, poll)
	h.cancel()
	select {
	case err := <-h.done:
		assert.NoError(t, err)
		h.done <- err // for the cleanup
	case <-time.After(waitFor):
		t.Fatal("agent did not stop")
	}
}

func fill(s []int, v int) {
	for i := range s {
		s[i] = v
	}
}

func TestRunRejectsIncompleteAgent(t *testing.T) {
	err := (&Agent{}).Run(context.Background())
	require.Error(t, err)
}

// memController is a Controller without HTTP: it shows the seam and feeds
// the agent what the HTTP client would never let through.
type memController struct {
	mu   sync.Mutex
	cmds []*protocol.Command
	hbs  []*protocol.Heartbeat
}

func (m *memController) Lookup(context.Context, []string, string) (*protocol.LookupResponse, error) {
	return &protocol.LookupResponse{Node: protocol.LookupNode{UUID: testNode},
		Config: protocol.AgentConfig{HeartbeatInterval: 0.01, AgentToken: "tok"}}, nil
}

func (m *memController) Heartbeat(_ context.Context, _ string, hb *protocol.Heartbeat) (*protocol.HeartbeatResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := hb.Validate(); err != nil {
		return nil, &HTTPError{Op: "heartbeat", StatusCode: http.StatusBadRequest, Message: err.Error()}
	}
	m.hbs = append(m.hbs, hb)
	resp := &protocol.HeartbeatResponse{HeartbeatInterval: 0.01}
	if len(m.cmds) > 0 {
		resp.Command, m.cmds = m.cmds[0], m.cmds[1:]
	}
	return resp, nil
}

func TestInvalidCommandFromControllerIsIgnored(t *testing.T) {
	mem := &memController{cmds: []*protocol.Command{{ID: "x1", Name: "format_everything"}, {ID: "x2", Name: protocol.CmdExecuteCleanStep}}}
	logs := &syncBuffer{}
	disp, err := hardware.NewDispatcher(context.Background(), testManager(newBlockingStep()))
	require.NoError(t, err)
	a := &Agent{Controller: mem, Hardware: StaticHardware(disp), Network: StaticMACs{"52:54:00:12:34:56"},
		Log: slog.New(slog.NewTextHandler(logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	require.Eventually(t, func() bool {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		return len(mem.hbs) >= 5
	}, waitFor, poll)
	cancel()
	require.NoError(t, <-done)
	mem.mu.Lock()
	defer mem.mu.Unlock()
	for _, hb := range mem.hbs {
		assert.Nil(t, hb.Command, "nothing was run or reported")
	}
	assert.Equal(t, 2, strings.Count(logs.String(), "ignoring invalid command"))
}

func TestHardwareIsBuiltFromTheLookupAndRetried(t *testing.T) {
	ctrl := newFakeController(t)
	var mu sync.Mutex
	var seen []string
	disp, err := hardware.NewDispatcher(context.Background(), testManager(newBlockingStep()))
	require.NoError(t, err)
	h := startAgent(t, ctrl, func(a *Agent) {
		a.Hardware = func(_ context.Context, lr *protocol.LookupResponse) (Hardware, error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, lr.Node.UUID)
			if len(seen) < 3 {
				return nil, errors.New("no manager supports this machine")
			}
			return disp, nil
		}
	})
	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 1 }, waitFor, poll)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{testNode, testNode, testNode}, seen)
	assert.Contains(t, h.logs.String(), "cannot set up hardware managers; retrying")
}

// countingNetwork returns a different MAC list from its second call on.
type countingNetwork struct {
	mu    sync.Mutex
	calls int
}

func (n *countingNetwork) Up(context.Context) ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls++
	if n.calls == 1 {
		return []string{"52:54:00:12:34:56"}, nil
	}
	return []string{"52:54:00:12:34:56", "52:54:00:12:34:57"}, nil
}

func (n *countingNetwork) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls
}

func TestUnreachableControllerMakesTheAgentRecheckItsNetwork(t *testing.T) {
	ctrl := newFakeController(t)
	ctrl.stop() // unreachable from the start
	netw := &countingNetwork{}
	h := startAgent(t, ctrl, func(a *Agent) { a.Network = netw })
	require.Eventually(t, func() bool { return netw.count() >= 2 }, waitFor, poll)
	assert.Contains(t, h.logs.String(), "controller unreachable; retrying lookup")
	assert.Contains(t, h.logs.String(), "MAC addresses changed")

	ctrl.restart()
	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 1 }, waitFor, poll)
	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()
	assert.Equal(t, "52:54:00:12:34:56,52:54:00:12:34:57", ctrl.lookups[0].URL.Query().Get("addresses"))
}

// TestAbortStopsTheRunningStep: an abort naming another command changes
// nothing; one naming the running step cancels it, which reports
// CommandAborted, and the agent goes on heartbeating.
func TestAbortStopsTheRunningStep(t *testing.T) {
	ctrl := newFakeController(t)
	h := startAgent(t, ctrl, nil)
	ctrl.send(cleanStep("c1", "erase_devices"), false)
	<-h.step.started
	ctrl.set(func(f *fakeController) { f.abort = "another" })
	n := len(ctrl.hbs())
	require.Eventually(t, func() bool { return len(ctrl.hbs()) > n+2 }, waitFor, poll)
	assert.Nil(t, ctrl.finalOf("c1"), "an abort of another command is ignored")

	ctrl.set(func(f *fakeController) { f.abort = "c1" })
	require.Eventually(t, func() bool { return ctrl.finalOf("c1") != nil }, waitFor, poll)
	final := ctrl.finalOf("c1")
	assert.Equal(t, protocol.CommandFailed, final.State)
	require.NotNil(t, final.Error)
	assert.Equal(t, protocol.ErrTypeAborted, final.Error.Type)
	n = len(ctrl.hbs())
	require.Eventually(t, func() bool { return len(ctrl.hbs()) > n+2 }, waitFor, poll, "the agent keeps heartbeating")
}
