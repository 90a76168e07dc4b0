package erasure

import (
	"fmt"
	"io"
	"strings"
)

// WriteText writes records as a human-readable document: one certificate
// of sanitization per device, with every field of the record and, when
// verified, the signing key's fingerprint.
func WriteText(w io.Writer, title string, recs []Verified) error {
	var b strings.Builder
	fmt.Fprintf(&b, "CERTIFICATES OF SANITIZATION (NIST SP 800-88)\n%s\n%d record(s)\n", title, len(recs))
	for i, v := range recs {
		r := v.Record
		line := func(k, val string) {
			if val != "" {
				fmt.Fprintf(&b, "  %-26s %s\n", k+":", val)
			}
		}
		fmt.Fprintf(&b, "\n%d. %s %s, serial %s\n", i+1, orDash(r.Media.Manufacturer), orDash(r.Media.Model), orDash(r.Media.Serial))
		line("Record", r.UUID)
		line("Node", strings.TrimSpace(r.Node.Name+" "+r.Node.UUID))
		if r.Node.Retired {
			line("Node retired", orDash(r.Node.RetiredReason))
		}
		line("BMC", r.Node.BMCAddress)
		line("Controller", r.Controller)
		line("Media type", r.Media.Type)
		line("Interface", r.Media.Interface)
		line("Size", fmt.Sprintf("%d bytes (%.1f GB)", r.Media.SizeBytes, float64(r.Media.SizeBytes)/1e9))
		line("Device", r.Media.Device)
		line("WWN", r.Media.WWN)
		line("Method type", r.Sanitization.Category)
		line("Technique", r.Sanitization.Technique)
		line("Tool", strings.TrimSpace(r.Tool.Name+" "+r.Tool.Version))
		line("Image SHA-256", r.Tool.ImageSHA256)
		line("Verification", r.Verification.Method)
		if r.Verification.Samples > 0 {
			line("Read back", fmt.Sprintf("%d bytes in %d samples, expected %s", r.Verification.BytesChecked, r.Verification.Samples, r.Verification.ExpectedPattern))
		}
		line("Verification result", r.Verification.Result)
		line("Started", r.StartedAt)
		line("Finished", r.FinishedAt)
		line("Requested by", r.RequestedBy)
		line("Destination", orDash(r.Destination))
		line("Step run", r.StepResult)
		line("Signed at", r.SignedAt)
		switch {
		case v.Err != nil:
			line("Signature", "INVALID: "+v.Err.Error())
		case v.Key != nil:
			line("Signature", "valid, Ed25519 key "+Fingerprint(v.Key))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
