package store

import "context"

// Enrolment is a node created together with what it cannot be seen
// without: its ports, its inventory and its first history lines.
type Enrolment struct {
	Node      *Node
	Ports     []*Port
	Inventory []byte // nil: none
	Events    []*Event
}

// Enrolments creates a node and its parts in one transaction: readers
// never see a half-made node, and a crash leaves all of it or none.
type Enrolments interface {
	// EnrolNode creates e.Node (setting its ID and Revision), its ports,
	// its inventory and its events, or nothing: a port whose address is
	// taken is ErrDuplicateAddr, as CreatePort would say.
	EnrolNode(ctx context.Context, e *Enrolment) error
}
