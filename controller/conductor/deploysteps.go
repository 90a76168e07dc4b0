package conductor

// Deployment's plan: the steps a deploy runs (the driver's, the deploy
// templates' named by the instance's traits, the user's), merged and
// checked, and the check of the templates when the verb is accepted.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// deploySteps is Ironic's _get_all_deployment_steps: the driver's enabled
// deploy steps, the steps of the deploy templates named by the node's
// instance traits, and the user's deploy_steps. A user step overrides a
// template step, and either overrides the driver step of the same name
// (priority 0 disables it); the result is sorted by priority.
func (c *deploying) deploySteps(ctx context.Context, n *store.Node, d Driver) ([]protocol.Step, error) {
	templates, steps, err := c.templateSteps(ctx, n)
	if err != nil {
		return nil, err
	}
	return c.mergeDeploySteps(n, d, templates, steps, n.Operation.UserDeploySteps)
}

// availableDeploySteps lists every deploy step the node offers.
func availableDeploySteps(n *store.Node, d Driver) []protocol.Step {
	if UsesAgent(n) {
		// the direct deploy interface's steps, the driver's out-of-band
		// ones (bios), then the agent's
		return mergeSteps(mergeSteps(agentDeploySteps, d.DeploySteps(n)), cachedSteps(n, "deploy"))
	}
	return d.DeploySteps(n)
}

// mergeDeploySteps merges and checks the driver's, the templates' and
// the user's deploy steps (see deploySteps).
func (c *deploying) mergeDeploySteps(n *store.Node, d Driver, templates []string, tsteps, user []protocol.Step) ([]protocol.Step, error) {
	byKey := map[string]protocol.Step{}
	var order []string
	for _, s := range availableDeploySteps(n, d) {
		byKey[s.Key()] = s
		order = append(order, s.Key())
	}
	cached := n.Operation.Agent.Steps != nil
	apply := func(u protocol.Step) error {
		s, known := byKey[u.Key()]
		if !known && conductorStep(u) {
			s, known = plannedConductorStep(u), true // run by the conductor (hold.go, reservedsteps.go)
		}
		if !known && UsesAgent(n) && !cached && (u.Interface == protocol.InterfaceDeploy || u.Interface == protocol.InterfaceRAID) {
			// in-band step of an agent that has not reported yet: the agent
			// validates it when it runs
			s, known = u, true
		}
		if !known {
			return fmt.Errorf("node does not support deploy step %s", u.Key())
		}
		if u.Priority > 0 {
			if u.Key() == "deploy.deploy" {
				return errors.New("deploy step deploy on interface deploy is a core step and cannot be overridden by user steps. It may be disabled by setting the priority to 0")
			}
			if err := s.CheckArgs(u.Args); err != nil {
				return err
			}
		}
		if !slices.Contains(order, u.Key()) {
			order = append(order, u.Key())
		}
		s.Priority, s.Args = u.Priority, u.Args
		byKey[u.Key()] = s
		return nil
	}
	for _, t := range tsteps {
		if err := apply(t); err != nil {
			return nil, Invalid("Validation of deploy steps from deploy templates matching this node's instance traits failed. "+
				"Matching deploy templates: %s. Errors: %v", strings.Join(templates, ","), err)
		}
	}
	for _, u := range user {
		if err := apply(u); err != nil {
			return nil, err
		}
	}
	var out []protocol.Step
	for _, k := range order {
		if byKey[k].Priority > 0 {
			out = append(out, byKey[k])
		}
	}
	protocol.SortSteps(out)
	return out, nil
}

// checkTemplates is the check of the deploy templates a deploy of the
// node would run, made when the verb is accepted (Ironic's
// validate_user_deploy_steps_and_templates with skip_missing: in-band
// steps an agent has not reported yet pass). The plan checks them again.
func (c *deploying) checkTemplates(ctx context.Context, n *store.Node, verb state.Verb) error {
	cur := state.State(n.ProvisionState)
	d, ok := c.drivers[n.Driver]
	if !ok || len(InstanceTraits(n)) == 0 || n.Maintenance || !state.Allowed(cur, verb.Event) || state.Working(cur) ||
		checkInstanceTraits(n) != nil {
		return nil // nothing to check, or acceptVerb refuses first
	}
	templates, steps, err := c.templateSteps(ctx, n)
	if err == nil {
		_, err = c.mergeDeploySteps(n, d, templates, steps, nil)
	}
	if err != nil {
		return Invalid("Failed to validate deploy or power info for node %s: %v", n.UUID, err)
	}
	return nil
}

// templateSteps reads the deploy templates named by the node's instance
// traits (Ironic's _get_deployment_templates) and returns their names and
// steps; two templates may not both have a step.
func (c *deploying) templateSteps(ctx context.Context, n *store.Node) ([]string, []protocol.Step, error) {
	traits := InstanceTraits(n)
	if len(traits) == 0 {
		return nil, nil, nil
	}
	templates, err := c.st.DeployTemplatesNamed(ctx, traits)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the deploy templates of traits %s: %w", strings.Join(traits, ", "), err)
	}
	var names []string
	var steps []protocol.Step
	for _, t := range templates {
		names = append(names, t.Name)
		for _, s := range t.Steps {
			steps = append(steps, protocol.Step{Interface: s.Interface, Step: s.Step, Args: s.Args, Priority: s.Priority})
		}
	}
	if d := protocol.Duplicates(steps); d != nil {
		dups := make([]string, len(d))
		for i, s := range d {
			dups[i] = s.Key()
		}
		return nil, nil, Invalid("Validation of deploy steps from deploy templates matching this node's instance traits failed. "+
			"Matching deploy templates: %s. Errors: deploy steps from all deploy templates matching this node's instance traits "+
			"cannot have the same interface and step. Duplicate deploy steps for %s", strings.Join(names, ","), strings.Join(dups, ", "))
	}
	return names, steps, nil
}

// InstanceTraits are the traits the instance asked for
// (instance_info.traits, strings only).
func InstanceTraits(n *store.Node) []string {
	raw, _ := n.InstanceInfo["traits"].([]any)
	var out []string
	for _, t := range raw {
		if s, ok := t.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// checkInstanceTraits is Ironic's validate_instance_info_traits: the
// instance's traits must be a list of strings, each also a trait of the
// node.
func checkInstanceTraits(n *store.Node) error {
	v, ok := n.InstanceInfo["traits"]
	if !ok || v == nil {
		return nil
	}
	raw, isList := v.([]any)
	if !isList {
		if s, isStr := v.(string); isStr && s == "" {
			return nil // empty, as Python's falsy check
		}
		return Invalid("Error parsing traits from Node %s instance_info field. A list of strings is expected.", n.UUID)
	}
	var missing []string
	for _, t := range raw {
		s, ok := t.(string)
		if !ok {
			return Invalid("Error parsing traits from Node %s instance_info field. A list of strings is expected.", n.UUID)
		}
		if !slices.Contains(n.Traits, s) && !slices.Contains(missing, s) {
			missing = append(missing, s)
		}
	}
	if missing != nil {
		return Invalid("Cannot specify instance traits that are not also set on the node. Node %s is missing traits %s",
			n.UUID, strings.Join(missing, ", "))
	}
	return nil
}
