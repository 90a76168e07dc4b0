package state

// Verb is a target of PUT /v1/nodes/{id}/states/provision.
type Verb struct {
	Name       string
	Event      Event
	MinVersion int // minimum minor API version (1.N)
	// Expect is the stable state a --wait client expects the verb to end in.
	Expect State
}

var verbs = map[string]Verb{
	"manage":   {"manage", EvManage, 4, Manageable},
	"provide":  {"provide", EvProvide, 4, Available},
	"inspect":  {"inspect", EvInspect, 6, Manageable},
	"abort":    {"abort", EvAbort, 13, NoState},
	"clean":    {"clean", EvClean, 15, Manageable},
	"adopt":    {"adopt", EvAdopt, 17, Active},
	"rescue":   {"rescue", EvRescue, 38, Rescue},
	"unrescue": {"unrescue", EvUnrescue, 38, Active},
	"active":   {"active", EvDeploy, 1, Active},
	"deploy":   {"deploy", EvDeploy, 73, Active},
	"rebuild":  {"rebuild", EvRebuild, 1, Active},
	"deleted":  {"deleted", EvDelete, 1, Available},
	"undeploy": {"undeploy", EvDelete, 73, Available},
	// unhold resumes a held flow, which then ends where it was going
	// (available or manageable after cleaning, active after deploying).
	"unhold": {"unhold", EvUnhold, 85, NoState},
	// service runs steps on an active node, which returns to active.
	"service": {"service", EvService, 87, Active},
}

// LookupVerb returns the verb for a target string.
func LookupVerb(target string) (Verb, bool) {
	v, ok := verbs[target]
	return v, ok
}

// Verbs lists every verb name.
func Verbs() []string {
	out := make([]string, 0, len(verbs))
	for k := range verbs {
		out = append(out, k)
	}
	return out
}
