package api

import (
	"bytes"
	"net/http"

	"github.com/anvil-metal/anvil/controller/store"
)

// A node list is read and written in sub-pages of subPage nodes, so that a
// page of 1000 detailed nodes is never held decoded whole: eight
// concurrent detailed lists of 1000 nodes held 8 × 5 MB of decoded
// documents, and set the controller's peak memory. Each sub-page is its
// own query, keyset-paged from the last node of the one before, as a
// client's pages are: no read transaction is held while a slow client
// reads (one would hold one of SQLite's four reader connections, and the
// only one of :memory:, for up to --http-write-timeout). Sorted by id (the
// default) the page is exact; sorted by a field that a node changes while
// the page is written, that node may show in two sub-pages or in none, as
// it may between a client's pages.
const subPage = 100

// readNodePages calls fn with each sub-page of the page p of nodes that
// match f, in order; fn is not called with an empty sub-page.
func (s *Server) readNodePages(r *http.Request, f store.NodeFilter, p store.Page, view []string, fn func([]*store.Node) error) error {
	read := func(st store.Store) error {
		left, marker := p.Limit, p.Marker
		for left > 0 {
			sub := p
			sub.Limit, sub.Marker = min(subPage, left), marker
			nodes, err := listNodeViews(r.Context(), st, f, sub, view)
			if err != nil {
				return err
			}
			if len(nodes) > 0 {
				if err := fn(nodes); err != nil {
					return err
				}
			}
			if len(nodes) < sub.Limit {
				return nil
			}
			left -= len(nodes)
			marker = nodes[len(nodes)-1].UUID
		}
		return nil
	}
	return read(s.st)
}

// pageChunk is how much of a node page is written to the connection at a
// time.
const pageChunk = 64 << 10

// nodePageWriter streams {"nodes": [...], "next": ...} to the client in
// chunks through one pooled buffer. A detailed page of 1000 nodes is
// megabytes: built whole, its buffer was allocated (and cleared) afresh
// most of the time, because a sync.Pool loses its contents at every other
// GC, and it pushed the controller's RSS. The status is sent with the
// first chunk, so an error before it (an unrenderable node: only a bug
// could make one; a store error) fails the request cleanly; a later one
// aborts the connection, never ending a truncated body as if complete.
type nodePageWriter struct {
	s       *Server
	w       http.ResponseWriter
	view    *nodeRenderer
	b       *bytes.Buffer
	n       int // nodes written
	started bool
}

func (pw *nodePageWriter) buf() *bytes.Buffer {
	if pw.b == nil {
		pw.b, _ = pw.s.bufs.Get().(*bytes.Buffer)
		if pw.b == nil {
			pw.b = new(bytes.Buffer)
		}
		pw.b.Reset()
		pw.b.WriteString(`{"nodes":[`)
	}
	return pw.b
}

func (pw *nodePageWriter) write(nodes []*store.Node) error {
	b := pw.buf()
	for _, n := range nodes {
		if pw.n > 0 {
			b.WriteByte(',')
		}
		pw.n++
		if err := pw.view.appendNode(b, n); err != nil {
			pw.s.log.Error("rendering a node page failed", "node", n.UUID, "err", err)
			return err
		}
		if b.Len() >= pageChunk {
			if err := pw.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (pw *nodePageWriter) flush() error {
	if !pw.started {
		pw.w.Header().Set("Content-Type", "application/json")
		pw.w.WriteHeader(http.StatusOK)
		pw.started = true
	}
	_, err := pw.w.Write(pw.b.Bytes())
	pw.b.Reset()
	return err
}

// fail ends a page that could not be completed: an error answer if
// nothing was sent yet, else an aborted connection.
func (pw *nodePageWriter) fail(err error) error {
	if !pw.started {
		return err
	}
	pw.s.log.Error("a node page failed mid-stream; aborting the response", "err", err)
	panic(http.ErrAbortHandler)
}

func (pw *nodePageWriter) finish(next string) error {
	b := pw.buf()
	b.WriteByte(']')
	if next != "" {
		b.WriteString(`,"next":`)
		appendString(b, next)
	}
	b.WriteString("}\n")
	return pw.flush()
}

func (pw *nodePageWriter) release() {
	if pw.b != nil {
		pw.s.bufs.Put(pw.b)
		pw.b = nil
	}
}
