package protocol

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ConfigDriveArg is write_image's argument carrying the configdrive: a
// base64 gzipped ISO9660 image or an HTTP(S) URL of one (Ironic's forms
// as ironic-python-agent receives them). The controller sends it in the
// command's node context, not in the step's arguments, so it is not kept
// with the step's result.
const ConfigDriveArg = "configdrive"

// MaxConfigDriveBytes bounds a configdrive image: it goes into a
// partition of 64 MiB at most (ironic-lib's MAX_CONFIG_DRIVE_SIZE_MB).
const MaxConfigDriveBytes = 64 << 20

// DecodeConfigDrive reads a base64 gzipped configdrive, at most
// MaxConfigDriveBytes once decompressed (so a small gzip bomb cannot
// exhaust memory). Whitespace in the base64 is ignored, as Python's
// b64decode does.
func DecodeConfigDrive(s string) ([]byte, error) {
	clean := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' || r == ' ' {
			return -1
		}
		return r
	}, s)
	raw, err := base64.StdEncoding.DecodeString(clean)
	if err != nil {
		return nil, fmt.Errorf("configdrive is not base64 encoded: %w", err)
	}
	return GunzipConfigDrive(raw)
}

// GunzipConfigDrive decompresses a gzipped configdrive, bounded as
// DecodeConfigDrive.
func GunzipConfigDrive(raw []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("configdrive is not gzipped: %w", err)
	}
	iso, err := io.ReadAll(io.LimitReader(zr, MaxConfigDriveBytes+1))
	if err != nil {
		return nil, fmt.Errorf("configdrive: decompressing: %w", err)
	}
	if len(iso) > MaxConfigDriveBytes {
		return nil, fmt.Errorf("configdrive is larger than %d bytes once decompressed (a configdrive partition holds 64 MiB)", MaxConfigDriveBytes)
	}
	if len(iso) == 0 {
		return nil, errors.New("configdrive is empty once decompressed")
	}
	return iso, nil
}
