// Package erasurepdf renders sanitization records as a PDF document, the
// same certificates as the text export (erasure.NewDocument), one page per
// record. It is its own package so that only the CLI links the PDF
// library (pdfcpu), not the controller.
package erasurepdf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pdfcpu/pdfcpu/pkg/api"
	"github.com/pdfcpu/pdfcpu/pkg/pdfcpu/model"

	"github.com/anvil-metal/anvil/controller/erasure"
)

// Page geometry (A4 portrait, points, origin lower left).
const (
	left       = 50
	valueX     = 175
	top        = 790
	lineHeight = 14
	fontSize   = 9
	// valueWidth is how many characters of a value fit on one line
	// between valueX and the right margin in 9 pt Helvetica (the widest
	// glyphs ~0.6 em; hex digests and UUIDs are narrower).
	valueWidth = 68
	// bottom is the lowest line; a certificate longer than a page goes on.
	bottom = 60
)

// Write renders recs (with subject naming what they are of) to w.
func Write(w io.Writer, subject string, recs []erasure.Verified) error {
	doc := erasure.NewDocument(subject, recs)
	spec := layout(doc)
	raw, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("pdf layout: %w", err)
	}
	// Without this pdfcpu writes a configuration directory (config.yml,
	// fonts) into the user's home the first time it runs.
	api.DisableConfigDir()
	conf := model.NewDefaultConfiguration()
	var out bytes.Buffer
	if err := api.Create(nil, bytes.NewReader(raw), &out, conf); err != nil {
		return fmt.Errorf("render PDF: %w", err)
	}
	_, err = w.Write(out.Bytes())
	return err
}

// The subset of pdfcpu's JSON page description used here.
type (
	spec struct {
		Paper  string          `json:"paper"`
		Origin string          `json:"origin"`
		Fonts  map[string]font `json:"fonts"`
		Pages  map[string]page `json:"pages"`
	}
	font struct {
		Name string `json:"name"`
		Size int    `json:"size"`
	}
	page struct {
		Content content `json:"content"`
	}
	content struct {
		Text []text `json:"text"`
	}
	text struct {
		Value string  `json:"value"`
		Pos   [2]int  `json:"pos"`
		Font  fontRef `json:"font"`
	}
	fontRef struct {
		Name string `json:"name"`
	}
)

// layout places the document's lines: the title block on every page and
// one certificate per page (continued on the next when it is longer).
func layout(d erasure.Document) spec {
	s := spec{Paper: "A4P", Origin: "LowerLeft", Pages: map[string]page{},
		Fonts: map[string]font{
			"title": {Name: "Helvetica-Bold", Size: 13},
			"head":  {Name: "Helvetica-Bold", Size: 10},
			"label": {Name: "Helvetica-Bold", Size: fontSize},
			"body":  {Name: "Helvetica", Size: fontSize},
		}}
	var pages []*page
	y := 0
	put := func(v, f string, x int) {
		p := pages[len(pages)-1]
		p.Content.Text = append(p.Content.Text, text{Value: pdfSafe(v), Pos: [2]int{x, y}, Font: fontRef{"$" + f}})
	}
	newPage := func(heading string) {
		pages = append(pages, &page{})
		y = top
		put(d.Title, "title", left)
		y -= 18
		put(d.Subject+" - "+d.Count, "body", left)
		y -= 2 * lineHeight
		if heading != "" {
			put(heading, "head", left)
			y -= lineHeight + 4
		}
	}
	if len(d.Certificates) == 0 {
		newPage("")
		put("No sanitization records.", "body", left)
	}
	for _, c := range d.Certificates {
		newPage(c.Heading)
		for _, f := range c.Fields {
			lines := wrap(f.Value, valueWidth)
			if y-lineHeight*min(len(lines)-1, 3) < bottom {
				newPage(c.Heading + " (continued)") // keep a short value with its label
			}
			put(f.Label+":", "label", left)
			for _, l := range lines {
				if y < bottom {
					newPage(c.Heading + " (continued)")
				}
				put(l, "body", valueX)
				y -= lineHeight
			}
		}
	}
	for i, p := range pages {
		s.Pages[strconv.Itoa(i+1)] = *p
	}
	return s
}

// wrap cuts s into lines of at most n runes, at spaces where it can.
func wrap(s string, n int) []string {
	var out []string
	for utf8.RuneCountInString(s) > n {
		r := []rune(s)
		cut := n
		if i := strings.LastIndex(string(r[:n]), " "); i > n/2 {
			cut = utf8.RuneCountInString(string(r[:n])[:i])
		}
		out = append(out, strings.TrimSpace(string(r[:cut])))
		s = strings.TrimSpace(string(r[cut:]))
	}
	return append(out, s)
}

// pdfSafe keeps what the standard fonts' WinAnsi encoding can show:
// printable Latin-1; anything else (a serial or name in another script,
// a control character) becomes '?', so a record can never break the
// document. The JSON and text exports keep the exact values.
func pdfSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) || r > 0xff {
			return '?'
		}
		return r
	}, s)
}
