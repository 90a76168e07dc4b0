package erasurepdf

import (
	"bytes"
	"crypto/ed25519"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/pdfcpu/pdfcpu/pkg/api"
	"github.com/pdfcpu/pdfcpu/pkg/pdfcpu/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/erasure"
)

func signed(t *testing.T, key ed25519.PrivateKey, recs ...erasure.Record) []erasure.Verified {
	t.Helper()
	s := erasure.NewSigner(key)
	var out []erasure.Verified
	for _, r := range recs {
		doc, err := s.Sign(r)
		require.NoError(t, err)
		v := erasure.Verify(doc.Data, s.PublicKey())
		require.NoError(t, v.Err)
		out = append(out, v)
	}
	return out
}

func record(device, serial string) erasure.Record {
	return erasure.Record{Format: erasure.RecordFormat, UUID: "rec-" + serial,
		Node:         erasure.NodeRef{UUID: "6f3a1c2e-0000-4000-8000-000000000007", Name: "rack1-07", Driver: "redfish", BMCAddress: "https://10.0.0.7", Retired: true, RetiredReason: "end of life (lease returned)"},
		Controller:   "ctl-1",
		Media:        erasure.Media{Manufacturer: "ATA", Model: "ST4000NM", Serial: serial, Type: "magnetic (hard disk drive)", Interface: "sata", SizeBytes: 4000787030016, Device: device},
		Sanitization: erasure.Sanitization{Category: "clear", Technique: "overwrite, 2 pass(es), the last with zeros", Method: "overwrite", Passes: 2},
		Tool:         erasure.Tool{Name: "anvil-agent", Version: "0.1.0", ImageSHA256: strings.Repeat("5e", 32)},
		Verification: erasure.Verification{Method: "sampled read-back of 66 regions spread over the device, first and last always", Samples: 66,
			BytesChecked: 4325376, ExpectedPattern: "zeros", Result: "passed: every byte read matched"},
		Destination: "recycling", StartedAt: "2026-11-25T09:00:00Z", FinishedAt: "2026-11-25T10:00:00Z",
		RequestedBy: `automated cleaning (controller policy) on undeploy requested by user "alice" (http_basic)`,
		StepResult:  "cmd-1", SignedAt: "2026-11-25T11:00:00Z"}
}

// pageTexts reads the PDF back with pdfcpu: it must validate, and each
// page's content stream gives the strings shown on it (PDF literal
// strings, escapes undone), one per text line.
func pageTexts(t *testing.T, pdf []byte) [][]string {
	t.Helper()
	api.DisableConfigDir()
	require.NoError(t, api.Validate(bytes.NewReader(pdf), model.NewDefaultConfiguration()), "a valid PDF")
	n, err := api.PageCount(bytes.NewReader(pdf), model.NewDefaultConfiguration())
	require.NoError(t, err)
	pages := make([][]string, n)
	lit := regexp.MustCompile(`\(((?:\\.|[^\\)])*)\)\s*Tj`)
	unescape := strings.NewReplacer(`\(`, `(`, `\)`, `)`, `\\`, `\`)
	err = api.ExtractContent(bytes.NewReader(pdf), nil, func(r io.Reader, page int) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllSubmatch(b, -1) {
			pages[page-1] = append(pages[page-1], unescape.Replace(string(m[1])))
		}
		return nil
	}, model.NewDefaultConfiguration())
	require.NoError(t, err)
	return pages
}

// TestWritePDF: one page per record, each with every field of the text
// document (the same Document), read back from the PDF.
func TestWritePDF(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	vs := signed(t, key, record("/dev/sda", "ZC1ABC"), record("/dev/sdb", "ZC2DEF"))
	var out bytes.Buffer
	require.NoError(t, Write(&out, "node rack1-07", vs))
	require.True(t, bytes.HasPrefix(out.Bytes(), []byte("%PDF-")))

	pages := pageTexts(t, out.Bytes())
	require.Len(t, pages, 2, "one page per record")
	doc := erasure.NewDocument("node rack1-07", vs)
	for i, c := range doc.Certificates {
		got := strings.Join(pages[i], "\n")
		assert.Contains(t, got, "CERTIFICATES OF SANITIZATION (NIST SP 800-88)")
		assert.Contains(t, got, "node rack1-07 - 2 record(s)")
		assert.Contains(t, got, c.Heading)
		for _, f := range c.Fields {
			assert.Contains(t, pages[i], f.Label+":", "page %d", i+1)
			for _, l := range wrap(f.Value, valueWidth) {
				assert.Contains(t, pages[i], l, "page %d, %s", i+1, f.Label)
			}
		}
	}
	assert.Contains(t, pages[0], "1. ATA ST4000NM, serial ZC1ABC")
	assert.Contains(t, pages[1], "2. ATA ST4000NM, serial ZC2DEF")
	assert.Contains(t, strings.Join(pages[0], " "), "valid, Ed25519 key "+erasure.Fingerprint(key.Public().(ed25519.PublicKey)))
	assert.Contains(t, strings.Join(pages[0], " "), `on undeploy requested by user "alice" (http_basic)`)
}

func TestWritePDFEdgeCases(t *testing.T) {
	t.Run("no records: one page that says so", func(t *testing.T) {
		var out bytes.Buffer
		require.NoError(t, Write(&out, "node empty", nil))
		pages := pageTexts(t, out.Bytes())
		require.Len(t, pages, 1)
		assert.Contains(t, pages[0], "No sanitization records.")
	})
	t.Run("values the standard fonts cannot show do not break it", func(t *testing.T) {
		_, key, err := ed25519.GenerateKey(nil)
		require.NoError(t, err)
		r := record("/dev/sda", "序列号\x00(x)\\")
		r.Node.Name = strings.Repeat("very-long-node-name-", 400) // wraps, and continues on a second page
		var out bytes.Buffer
		require.NoError(t, Write(&out, "node odd", signed(t, key, r)))
		pages := pageTexts(t, out.Bytes())
		require.Len(t, pages, 3, "a certificate (and a value) longer than a page continues")
		for _, p := range pages[1:] {
			assert.Contains(t, p, "1. ATA ST4000NM, serial ????(x)\\ (continued)")
		}
		assert.Contains(t, pages[2], "Signature:", "the last field on the last page")
		all := strings.Join(pages[0], "\n")
		assert.Contains(t, all, "serial ????(x)\\", "unshowable runes become ?, parentheses and backslashes survive")
	})
}

func TestWrap(t *testing.T) {
	assert.Equal(t, []string{"short"}, wrap("short", 10))
	assert.Equal(t, []string{"aaaa bbbb", "cccc"}, wrap("aaaa bbbb cccc", 10))
	assert.Equal(t, []string{"0123456789", "0123"}, wrap("01234567890123", 10), "no space: cut hard")
	for _, l := range wrap(strings.Repeat("word ", 50), 20) {
		assert.LessOrEqual(t, len(l), 20)
	}
}

func TestLayoutStaysOnThePage(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	r := record("/dev/sda", "ZC1")
	r.RequestedBy = strings.Repeat("x ", 5000)
	s := layout(erasure.NewDocument("node n", signed(t, key, r, record("/dev/sdb", "ZC2"))))
	require.Greater(t, len(s.Pages), 2)
	for n, p := range s.Pages {
		for _, tx := range p.Content.Text {
			assert.GreaterOrEqual(t, tx.Pos[1], bottom, "page %s: %q", n, tx.Value)
			assert.LessOrEqual(t, tx.Pos[1], top, "page %s: %q", n, tx.Value)
		}
	}
}
