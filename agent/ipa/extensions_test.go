package ipa

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ironicStep is one step of a get_*_steps answer as Ironic reads it.
type ironicStep struct {
	Interface       string
	Priority        float64
	Abortable       bool
	RebootRequested bool
}

func stepsOf(t *testing.T, result any, key string) map[string]ironicStep {
	t.Helper()
	byManager, ok := result.(map[string]any)[key].(map[string]any)
	require.True(t, ok, "%s is an object keyed by manager: %v", key, result)
	out := map[string]ironicStep{}
	for _, steps := range byManager {
		for _, s := range steps.([]any) {
			m := s.(map[string]any)
			for _, k := range []string{"interface", "step", "priority", "abortable", "reboot_requested"} {
				require.Contains(t, m, k, "IPA's step fields, which Ironic's overrides and sorting read")
			}
			out[m["step"].(string)] = ironicStep{m["interface"].(string), m["priority"].(float64), m["abortable"].(bool), m["reboot_requested"].(bool)}
		}
	}
	return out
}

// TestStepsInIPANamesAndPriorities checks what Ironic's priority overrides
// act on: Ironic replaces priorities by step name ([deploy]
// erase_devices_priority and erase_devices_metadata_priority in the deploy
// interface's get_clean_steps, [conductor]clean_step_priority_override as
// "interface.step:priority") in the list the agent returns, so the names,
// interfaces and default priorities must be IPA's.
func TestStepsInIPANamesAndPriorities(t *testing.T) {
	r := newRig(t)
	node := map[string]any{"node": map[string]any{"uuid": "n"}, "ports": []any{}}
	code, res := r.command("clean.get_clean_steps", node, false)
	require.Equal(t, 200, code)
	assert.Equal(t, "SUCCEEDED", res["command_status"])
	assert.Equal(t, "get_clean_steps", res["command_name"])
	result := res["command_result"]
	assert.Equal(t, map[string]any{"fake_manager": "7", "generic_hardware_manager": "1.2"}, result.(map[string]any)["hardware_manager_version"])
	clean := stepsOf(t, result, "clean_steps")
	assert.Equal(t, map[string]ironicStep{
		"erase_devices_metadata": {"deploy", 99, true, false},
		"erase_devices":          {"deploy", 10, true, false},
		"erase_devices_express":  {"deploy", 0, false, false},
		"delete_configuration":   {"raid", 0, false, false},
		"create_configuration":   {"raid", 0, false, false},
		"verify_hardware":        {"deploy", 0, false, false},
		"burnin_cpu":             {"deploy", 0, true, false},
		"burnin_memory":          {"deploy", 0, true, false},
		"burnin_disk":            {"deploy", 0, true, false},
		"burnin_network":         {"deploy", 0, true, false},
	}, clean)

	code, res = r.command("deploy.get_deploy_steps", node, false)
	require.Equal(t, 200, code)
	deploy := stepsOf(t, res["command_result"], "deploy_steps")
	assert.Equal(t, ironicStep{"deploy", 0, false, false}, deploy["write_image"])
	assert.Equal(t, ironicStep{"deploy", 0, true, false}, deploy["erase_devices_metadata"])

	// An overridden priority comes back in the step Ironic sends; the
	// agent runs the named step whatever priority it carries (Ironic
	// decides the order and skips priority 0).
	p := cleanStep("erase_devices", nil)
	p["step"].(map[string]any)["priority"] = 0
	code, res = r.command("clean.execute_clean_step", p, true)
	require.Equal(t, 200, code)
	assert.Equal(t, "SUCCEEDED", res["command_status"])
	assert.Equal(t, 0.0, res["command_result"].(map[string]any)["clean_step"].(map[string]any)["priority"])
}

func TestExecuteStepArguments(t *testing.T) {
	r := newRig(t)
	p := cleanStep("erase_devices", map[string]any{"iterations": 2})
	p["node"].(map[string]any)["driver_internal_info"] = map[string]any{
		"agent_erase_devices_iterations": 3, "agent_erase_devices_zeroize": false, "agent_secret_token": "never passed",
	}
	code, res := r.command("clean.execute_clean_step", p, true)
	require.Equal(t, 200, code)
	require.Equal(t, "SUCCEEDED", res["command_status"], "%v", res)
	// The step's args, then the node's erase settings IPA reads from
	// driver_internal_info; nothing else of the node.
	assert.Equal(t, []map[string]any{{"iterations": 2.0, "agent_erase_devices_iterations": 3.0, "agent_erase_devices_zeroize": false}}, r.stepArgs())
}

// A stock Ironic sends the node with its driver_info, where IPA reads the
// burn-in options: the agent takes those (and only those) keys.
func TestBurninArgumentsFromDriverInfo(t *testing.T) {
	r := newRig(t)
	p := cleanStep("burnin_cpu", map[string]any{"agent_burnin_cpu_cpu": 1})
	p["node"].(map[string]any)["driver_info"] = map[string]any{
		"agent_burnin_cpu_timeout": 30, "agent_burnin_cpu_cpu": 4, "ipmi_password": "never passed", "agent_burnin_vm_timeout": 60,
	}
	code, res := r.command("clean.execute_clean_step", p, true)
	require.Equal(t, 200, code)
	require.Equal(t, "SUCCEEDED", res["command_status"], "%v", res)
	assert.Equal(t, []map[string]any{{"agent_burnin_cpu_cpu": 1.0, "agent_burnin_cpu_timeout": 30.0}}, r.stepArgs())
}

func TestExecuteStepVersionMismatch(t *testing.T) {
	r := newRig(t)
	for _, v := range []any{
		map[string]any{"fake_manager": "6", "generic_hardware_manager": "1.2"},
		map[string]any{"fake_manager": "7"},
		map[string]any{"fake_manager": 7, "generic_hardware_manager": "1.2"},
		[]any{"7"},
	} {
		p := cleanStep("erase_devices_metadata", nil)
		p["clean_version"] = v
		code, res := r.command("clean.execute_clean_step", p, true)
		require.Equal(t, 200, code)
		assert.Equal(t, "CLEAN_VERSION_MISMATCH", res["command_status"], "%v", v)
		cerr := res["command_error"].(map[string]any)
		assert.Equal(t, "VersionMismatch", cerr["type"])
		assert.Equal(t, 409.0, cerr["code"])
		assert.Equal(t, "Hardware managers version mismatch, reload agent with correct version", cerr["message"])
	}
	assert.Empty(t, r.stepArgs(), "no step ran on a version mismatch")

	p := cleanStep("erase_devices_metadata", nil)
	delete(p, "clean_version") // the first run of a cleaning: nothing to compare
	_, res := r.command("clean.execute_clean_step", p, true)
	assert.Equal(t, "SUCCEEDED", res["command_status"])
	p = cleanStep("write_image", nil)
	p["deploy_version"] = map[string]any{"fake_manager": "1"}
	delete(p, "clean_version")
	_, res = r.command("deploy.execute_deploy_step", p, true)
	assert.Equal(t, "CLEAN_VERSION_MISMATCH", res["command_status"], "deploy steps compare deploy_version")
}

func TestExecuteStepRefusesMalformedSteps(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		step any
		want string
	}{
		{nil, "Invalid command parameters: clean step must be an object"},
		{"erase_devices", "Invalid command parameters: clean step must be an object"},
		{map[string]any{"interface": "deploy"}, `Invalid command parameters: Malformed clean_step, no "step" key`},
		{map[string]any{"step": 5}, `Invalid command parameters: Malformed clean_step, no "step" key`},
		{map[string]any{"step": "erase_devices", "args": []any{1}}, "Invalid command parameters: clean step args must be an object"},
	} {
		code, res := r.command("clean.execute_clean_step", map[string]any{"step": tc.step, "node": map[string]any{}}, false)
		assert.Equal(t, 400, code, "%v", tc.step)
		assert.Equal(t, faultBody("Client", tc.want), res)
	}
	assert.Empty(t, r.srv.Commands.List(), "refused before being recorded, as IPA's validators do")
}

// imageInfo is Ironic 21.4's image_info for a whole-disk image over HTTP.
func imageInfo() map[string]any {
	return map[string]any{
		"id": "disk.raw", "urls": []any{"http://127.0.0.1:8080/disk.raw"}, "disk_format": "raw", "container_format": "bare",
		"stream_raw_images": true, "image_type": "whole-disk",
		"os_hash_algo": "SHA256", "os_hash_value": strings.Repeat("AB", 32), "checksum": strings.Repeat("c", 32),
	}
}

func TestWriteImageDeployStep(t *testing.T) {
	r := newRig(t)
	p := cleanStep("write_image", nil)
	delete(p, "clean_version")
	p["step"].(map[string]any)["args"] = map[string]any{"image_info": imageInfo(), "configdrive": nil}
	p["node"].(map[string]any)["properties"] = map[string]any{"root_device": map[string]any{"serial": "S1"}}
	code, res := r.command("deploy.execute_deploy_step", p, true)
	require.Equal(t, 200, code)
	require.Equal(t, "SUCCEEDED", res["command_status"], "%v", res)
	assert.Equal(t, []map[string]any{{
		"image_url": "http://127.0.0.1:8080/disk.raw", "image_checksum": "sha256:" + strings.Repeat("ab", 32),
		"image_disk_format": "raw", "root_device": map[string]any{"serial": "S1"},
	}}, r.stepArgs(), "os_hash_* win over the legacy checksum, as in IPA")
	assert.Contains(t, res["command_result"], "deploy_result")
	assert.Contains(t, res["command_result"], "deploy_step")

	p["step"].(map[string]any)["args"] = map[string]any{}
	_, res = r.command("deploy.execute_deploy_step", p, true)
	assert.Equal(t, "FAILED", res["command_status"])
	assert.Equal(t, "write_image needs an image_info object", res["command_error"].(map[string]any)["details"])
}

func TestPrepareImage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(info map[string]any)
		code   int
		fault  string // the 400's text
		status string
		result string // command_result.result or command_error.details
		args   map[string]any
	}{
		{name: "sha256", change: func(map[string]any) {}, code: 200, status: "SUCCEEDED",
			result: "prepare_image: image (disk.raw) written to device /dev/fake0 root_uuid=None",
			args:   map[string]any{"image_url": "http://127.0.0.1:8080/disk.raw", "image_checksum": "sha256:" + strings.Repeat("ab", 32), "image_disk_format": "raw"}},
		{name: "legacy md5", change: func(i map[string]any) { delete(i, "os_hash_algo"); delete(i, "os_hash_value") }, code: 200, status: "SUCCEEDED",
			result: "prepare_image: image (disk.raw) written to device /dev/fake0 root_uuid=None",
			args:   map[string]any{"image_url": "http://127.0.0.1:8080/disk.raw", "image_checksum": "md5:" + strings.Repeat("c", 32), "image_disk_format": "raw"}},
		{name: "sha512 in checksum", change: func(i map[string]any) {
			delete(i, "os_hash_algo")
			delete(i, "os_hash_value")
			i["checksum"] = strings.Repeat("D", 128)
			i["disk_format"] = "qcow2"
		}, code: 200, status: "SUCCEEDED", result: "prepare_image: image (disk.raw) written to device /dev/fake0 root_uuid=None",
			args: map[string]any{"image_url": "http://127.0.0.1:8080/disk.raw", "image_checksum": "sha512:" + strings.Repeat("d", 128), "image_disk_format": "qcow2"}},
		{name: "no id", change: func(i map[string]any) { delete(i, "id") }, code: 400, fault: "Image is missing 'id' field."},
		{name: "no urls", change: func(i map[string]any) { delete(i, "urls") }, code: 400, fault: "Image is missing 'urls' field."},
		{name: "empty urls", change: func(i map[string]any) { i["urls"] = []any{} }, code: 400, fault: "Image 'urls' must be a list with at least one element."},
		{name: "urls a string", change: func(i map[string]any) { i["urls"] = "http://x" }, code: 400, fault: "Image 'urls' must be a list with at least one element."},
		{name: "no checksum", change: func(i map[string]any) {
			delete(i, "checksum")
			delete(i, "os_hash_algo")
			delete(i, "os_hash_value")
		}, code: 400, fault: "Image checksum is not available, either the 'checksum' field or the 'os_hash_algo' and 'os_hash_value' fields pair must be set for image verification."},
		{name: "algo without value", change: func(i map[string]any) { delete(i, "os_hash_value") }, code: 400, fault: "Image 'os_hash_value' must be a non-empty string."},
		{name: "checksum a number", change: func(i map[string]any) { i["checksum"] = 5 }, code: 400, fault: "Image 'checksum' must be a non-empty string."},
		{name: "sha1", change: func(i map[string]any) { i["os_hash_algo"] = "sha1" }, code: 200, status: "FAILED",
			result: `os_hash_algo "sha1" is not supported (sha256, sha512, md5)`},
		{name: "checksum file", change: func(i map[string]any) {
			delete(i, "os_hash_algo")
			delete(i, "os_hash_value")
			i["checksum"] = "http://127.0.0.1:8080/SHA256SUMS"
		}, code: 200, status: "FAILED", result: "checksum files (a URL in 'checksum') are not supported by the anvil agent; set os_hash_algo and os_hash_value"},
		{name: "partition image", change: func(i map[string]any) { i["image_type"] = "partition" }, code: 200, status: "FAILED",
			result: "image disk.raw: partition images (image_type=partition) is not supported by the anvil agent"},
		{name: "configdrive", change: func(i map[string]any) { i["configdrive"] = "H4sI" }, code: 200, status: "SUCCEEDED",
			result: "prepare_image: image (disk.raw) written to device /dev/fake0 root_uuid=None",
			args: map[string]any{"image_url": "http://127.0.0.1:8080/disk.raw", "image_checksum": "sha256:" + strings.Repeat("ab", 32),
				"image_disk_format": "raw", "configdrive": "H4sI"}},
		{name: "configdrive object", change: func(i map[string]any) { i["configdrive"] = map[string]any{"user_data": "x"} }, code: 200, status: "FAILED",
			result: "a configdrive that is not a string (a base64 gzipped ISO or a URL) is not supported by the anvil agent"},
		{name: "vmdk", change: func(i map[string]any) { i["disk_format"] = "vmdk" }, code: 200, status: "FAILED",
			result: `image disk.raw: disk_format "vmdk" (raw and qcow2 are) is not supported by the anvil agent`},
		{name: "url not a string", change: func(i map[string]any) { i["urls"] = []any{5} }, code: 200, status: "FAILED",
			result: "Invalid command parameters: Image 'urls' must hold URL strings."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			info := imageInfo()
			tc.change(info)
			code, res := r.command("standby.prepare_image", map[string]any{"image_info": info}, true)
			require.Equal(t, tc.code, code, "%v", res)
			if tc.code != 200 {
				assert.Equal(t, faultBody("Client", "Invalid command parameters: "+tc.fault), res)
				assert.Empty(t, r.srv.Commands.List())
				return
			}
			assert.Equal(t, "prepare_image", res["command_name"])
			require.Equal(t, tc.status, res["command_status"], "%v", res)
			if tc.status == "SUCCEEDED" {
				assert.Equal(t, map[string]any{"result": tc.result}, res["command_result"])
				assert.Equal(t, []map[string]any{tc.args}, r.stepArgs())
			} else {
				assert.Equal(t, tc.result, res["command_error"].(map[string]any)["details"])
				assert.Empty(t, r.stepArgs(), "nothing was written")
			}
		})
	}
}

func TestCacheImageUsesTheCachedNodesRootDevice(t *testing.T) {
	r := newRig(t)
	r.ext.SetNode(map[string]any{"properties": map[string]any{"root_device": map[string]any{"name": "/dev/sdb"}}})
	code, res := r.command("standby.cache_image", map[string]any{"image_info": imageInfo()}, true)
	require.Equal(t, 200, code)
	assert.Equal(t, "SUCCEEDED", res["command_status"])
	assert.Equal(t, map[string]any{"result": "cache_image: image (disk.raw) cached to device /dev/fake0 "}, res["command_result"])
	require.Len(t, r.stepArgs(), 1)
	assert.Equal(t, map[string]any{"name": "/dev/sdb"}, r.stepArgs()[0]["root_device"])
}

func TestStandbyAndOtherCommands(t *testing.T) {
	r := newRig(t)
	code, res := r.command("standby.get_partition_uuids", map[string]any{}, false)
	assert.Equal(t, 200, code)
	assert.Equal(t, "SUCCEEDED", res["command_status"])
	assert.Equal(t, map[string]any{}, res["command_result"], "whole-disk images have no partitions to report")

	code, res = r.command("standby.sync", map[string]any{}, false)
	assert.Equal(t, 200, code)
	assert.Equal(t, "SUCCEEDED", res["command_status"])
	select {
	case <-r.synced:
	default:
		t.Error("standby.sync did not sync")
	}

	code, res = r.command("image.install_bootloader", map[string]any{"root_uuid": nil, "target_boot_mode": "uefi"}, true)
	assert.Equal(t, 200, code)
	assert.Equal(t, "SUCCEEDED", res["command_status"])
	assert.Empty(t, r.stepArgs(), "whole-disk images: nothing is written")

	code, res = r.command("log.collect_system_logs", map[string]any{}, false)
	assert.Equal(t, 200, code)
	assert.Equal(t, map[string]any{"system_logs": base64.StdEncoding.EncodeToString([]byte("tgz"))}, res["command_result"])

	for cmd, action := range map[string]string{"standby.power_off": "power_off", "standby.run_image": "reboot"} {
		code, res = r.command(cmd, map[string]any{}, true)
		assert.Equal(t, 200, code)
		assert.Equal(t, "SUCCEEDED", res["command_status"], "answered before the machine goes")
		select {
		case got := <-r.power.done:
			assert.Equal(t, action, got)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no power action", cmd)
		}
	}
}

func TestPowerAndLogsNotConfigured(t *testing.T) {
	r := newRig(t)
	r.ext.Power, r.ext.Logs = nil, nil
	_, res := r.command("standby.power_off", map[string]any{}, true)
	assert.Equal(t, "FAILED", res["command_status"])
	assert.Equal(t, "SystemRebootError", res["command_error"].(map[string]any)["type"])
	_, res = r.command("log.collect_system_logs", map[string]any{}, true)
	assert.Equal(t, "FAILED", res["command_status"], "a failed sync command is recorded, as IPA does")
	assert.Equal(t, map[string]any{"type": "CommandExecutionError", "code": 500.0, "message": "Command execution failed",
		"details": "log collection is not configured in this agent"}, res["command_error"])
}

// Under a stock Ironic, verify_hardware compares with the properties of
// the node in the command (Ironic keeps inspection data apart).
func TestVerifyHardwareGetsIronicsProperties(t *testing.T) {
	r := newRig(t)
	p := cleanStep("verify_hardware", map[string]any{"health_checks": false})
	p["node"].(map[string]any)["properties"] = map[string]any{"memory_mb": 1024, "cpus": 2}
	code, res := r.command("clean.execute_clean_step", p, true)
	require.Equal(t, 200, code)
	require.Equal(t, "SUCCEEDED", res["command_status"], "%v", res)
	assert.Equal(t, []map[string]any{{"health_checks": false, "properties": map[string]any{"memory_mb": 1024.0, "cpus": 2.0}}}, r.stepArgs())
}
