package erasure

import (
	"fmt"
	"io"
	"strings"
)

// Document is records as human-readable certificates of sanitization, one
// per device with every field of its record and, when verified, the
// signing key's fingerprint: what the text and the PDF export both show.
type Document struct {
	Title        string // "CERTIFICATES OF SANITIZATION (NIST SP 800-88)"
	Subject      string // what the records are of: "node NAME"
	Count        string // "2 record(s)"
	Certificates []Certificate
}

// Certificate is one record's certificate.
type Certificate struct {
	Heading string // "1. ATA ST4000, serial ZC1"
	Fields  []Field
}

// Field is one labelled line of a certificate.
type Field struct{ Label, Value string }

// NewDocument lays recs out as certificates; subject says what they are of.
func NewDocument(subject string, recs []Verified) Document {
	d := Document{Title: "CERTIFICATES OF SANITIZATION (NIST SP 800-88)", Subject: subject, Count: fmt.Sprintf("%d record(s)", len(recs))}
	for i, v := range recs {
		r := v.Record
		c := Certificate{Heading: fmt.Sprintf("%d. %s %s, serial %s", i+1, orDash(r.Media.Manufacturer), orDash(r.Media.Model), orDash(r.Media.Serial))}
		line := func(k, val string) {
			if val != "" {
				c.Fields = append(c.Fields, Field{k, val})
			}
		}
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
		line("Scope", r.Sanitization.Scope)
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
		d.Certificates = append(d.Certificates, c)
	}
	return d
}

// WriteText writes records as a human-readable document (NewDocument).
func WriteText(w io.Writer, title string, recs []Verified) error {
	d := NewDocument(title, recs)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\n%s\n", d.Title, d.Subject, d.Count)
	for _, c := range d.Certificates {
		fmt.Fprintf(&b, "\n%s\n", c.Heading)
		for _, f := range c.Fields {
			fmt.Fprintf(&b, "  %-26s %s\n", f.Label+":", f.Value)
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
