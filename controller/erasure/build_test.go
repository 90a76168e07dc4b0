package erasure

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func buildFor(t *testing.T, step, result string) []Record {
	t.Helper()
	in := testInput(t)
	in.Result.Step, in.Result.Result = step, json.RawMessage(result)
	recs, err := Build(in)
	require.NoError(t, err)
	return recs
}

func bySerial(recs []Record) map[string]Record {
	out := map[string]Record{}
	for _, r := range recs {
		out[r.Media.Serial] = r
	}
	return out
}

// A RAID1 (md0) over /dev/sda2 and /dev/sdb2, whose disks' first
// partitions are erased on their own, and a RAID1 (md1) over two whole
// disks, as the agent reports them (hardware/erase: erased_through,
// md_members).
const raidErase = `{"devices":[
 {"plan":{"device":"/dev/sda","size":2000000000,"action":"skip","rotational":true,"vendor":"ATA","model":"HDD","serial":"SA","controller":"sata",
   "reason":"/dev/sda2 hold(s) members of software RAID md0, erased through the array; /dev/sda1 erased as devices of their own",
   "erased_through":["/dev/md0","/dev/sda1"],"md_members":["/dev/sda2"]},"status":"skipped"},
 {"plan":{"device":"/dev/sda1","size":500000000,"action":"erase","controller":"partition"},"status":"erased","method":"overwrite",
   "attempts":[{"method":"overwrite","passes":2,"verification":{"pattern":"zeros","samples":10,"bytes_checked":40960}}],
   "started_at":"2026-11-25T09:00:05Z","finished_at":"2026-11-25T09:10:00Z"},
 {"plan":{"device":"/dev/sdb","size":2000000000,"action":"skip","rotational":true,"serial":"SB","controller":"sata",
   "erased_through":["/dev/md0","/dev/sdb1"],"md_members":["/dev/sdb2"]},"status":"skipped"},
 {"plan":{"device":"/dev/sdb1","size":500000000,"action":"erase","controller":"partition"},"status":"failed","error":"write error"},
 {"plan":{"device":"/dev/md0","size":1400000000,"action":"erase","controller":"md"},"status":"erased","method":"overwrite",
   "attempts":[{"method":"overwrite","passes":2,"verification":{"pattern":"zeros","samples":66,"bytes_checked":270336}}],
   "started_at":"2026-11-25T09:00:01Z","finished_at":"2026-11-25T09:20:00Z"},
 {"plan":{"device":"/dev/sdc","size":1000000000,"action":"skip","serial":"SC","controller":"sata",
   "erased_through":["/dev/md1"],"md_members":["/dev/sdc"]},"status":"skipped"},
 {"plan":{"device":"/dev/md1","size":990000000,"action":"erase","controller":"md"},"status":"erased","method":"blkzeroout",
   "attempts":[{"method":"blkzeroout","verification":{"pattern":"zeros","samples":66,"bytes_checked":270336}}]}]}`

func TestRecordsForSoftwareRAIDMembers(t *testing.T) {
	recs := buildFor(t, StepErase, raidErase)
	got := bySerial(recs)
	require.Len(t, recs, 2, "sda (all of it reached) and sdc; not sdb (sdb1 failed), not the arrays or partitions")
	sa, sc := got["SA"], got["SC"]
	assert.Equal(t, "/dev/sda", sa.Media.Device)
	assert.Equal(t, int64(2000000000), sa.Media.SizeBytes)
	assert.Equal(t, "magnetic (hard disk drive)", sa.Media.Type)
	assert.Equal(t, "clear", sa.Sanitization.Category)
	assert.Equal(t, "through software RAID /dev/md0: overwrite, 2 pass(es), the last with zeros; partition /dev/sda1 erased on its own: overwrite, 2 pass(es), the last with zeros", sa.Sanitization.Technique)
	assert.Equal(t, "overwrite via /dev/md0, overwrite via /dev/sda1", sa.Sanitization.Method)
	assert.Equal(t, "the data areas of software RAID member partition(s) /dev/sda2, written through /dev/md0 (their md metadata not overwritten); "+
		"partition(s) /dev/sda1 erased on their own; the partition table and the space outside the partitions were not overwritten", sa.Sanitization.Scope)
	assert.Equal(t, Verification{Method: "sampled read-back of 76 regions through /dev/md0, /dev/sda1 (an array reads one copy of mirrored data)",
		Samples: 76, BytesChecked: 311296, ExpectedPattern: "zeros", Result: "passed: every byte read matched"}, sa.Verification)
	assert.Equal(t, "2026-11-25T09:00:01Z", sa.StartedAt, "the earliest start")
	assert.Equal(t, "2026-11-25T09:20:00Z", sa.FinishedAt, "the latest end")

	assert.Equal(t, "blkzeroout via /dev/md1", sc.Sanitization.Method)
	assert.Equal(t, "the data area of software RAID member /dev/sdc, written through /dev/md1; its md metadata (superblock, bitmap, the space before the data offset) was not overwritten", sc.Sanitization.Scope)
	assert.NotEqual(t, sa.UUID, sc.UUID)
}

func TestRecordsForOtherEraseSteps(t *testing.T) {
	t.Run("erase_devices_express: NVMe formats, not metadata wipes", func(t *testing.T) {
		recs := buildFor(t, StepEraseExpress, `{"nvme":{"devices":[
		 {"plan":{"device":"/dev/nvme0n1","size":960197124096,"controller":"nvme","nvme":{"model":"PM9A3","serial":"S64G"}},
		  "status":"erased","method":"nvme_format_user_data_erase","attempts":[{"method":"nvme_format_user_data_erase","verification":{"pattern":"zeros","samples":66,"bytes_checked":1}}]}]},
		 "metadata":{"devices":[{"device":"/dev/sda"}]}}`)
		require.Len(t, recs, 1)
		assert.Equal(t, "S64G", recs[0].Media.Serial)
		assert.Equal(t, "purge", recs[0].Sanitization.Category)
		assert.Contains(t, recs[0].Sanitization.Technique, "user data erase")
		assert.Empty(t, buildFor(t, StepEraseExpress, `{"metadata":{"devices":[{"device":"/dev/sda"}]}}`), "no NVMe formatted: nothing")
	})
	t.Run("erase_devices_metadata certifies nothing", func(t *testing.T) {
		assert.False(t, Certifies(StepEraseMetadata))
		assert.Empty(t, buildFor(t, StepEraseMetadata, eraseResult), "even a result that looks like an erase")
	})
	t.Run("manual erase_devices with arguments: what the agent did", func(t *testing.T) {
		in := testInput(t)
		in.Manual, in.RequestedBy = true, `manual cleaning requested by user "alice" (http_basic)`
		in.Result.Args = map[string]any{"iterations": 3, "enable_ata_secure_erase": false}
		in.Result.Result = json.RawMessage(`{"devices":[{"plan":{"device":"/dev/sda","size":4000,"rotational":true,"serial":"ZC1"},"status":"erased","method":"overwrite",
		 "attempts":[{"method":"overwrite","passes":4,"verification":{"pattern":"zeros","samples":66,"bytes_checked":4096}}]}]}`)
		recs, err := Build(in)
		require.NoError(t, err)
		require.Len(t, recs, 1)
		assert.Equal(t, 4, recs[0].Sanitization.Passes, "three random passes and the zero pass")
		assert.Equal(t, "overwrite, 4 pass(es), the last with zeros", recs[0].Sanitization.Technique)
		assert.Equal(t, `manual cleaning requested by user "alice" (http_basic)`, recs[0].RequestedBy)
	})
	t.Run("an older agent without erased_through: the array is certified as a device", func(t *testing.T) {
		recs := buildFor(t, StepErase, `{"devices":[{"plan":{"device":"/dev/md0","size":1000,"controller":"md"},"status":"erased","method":"overwrite",
		 "attempts":[{"method":"overwrite","passes":1,"verification":{"pattern":"zeros","samples":2,"bytes_checked":2}}]},
		 {"plan":{"device":"/dev/sda","size":2000,"controller":"sata","serial":"A"},"status":"skipped","plan_reason":"member"}]}`)
		require.Len(t, recs, 1)
		assert.Equal(t, "/dev/md0", recs[0].Media.Device)
	})
}
