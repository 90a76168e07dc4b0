package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/anvil-metal/anvil/protocol"
)

func asMaxBytes(err error, target **http.MaxBytesError) bool { return errors.As(err, target) }

// parseSteps checks the schema of clean_steps (interface, step, args?) or
// deploy_steps (interface, step, args, priority — all required).
func parseSteps(raw []map[string]any, deploy bool) ([]protocol.Step, error) {
	if deploy {
		return parseStepsOf("deploy", raw)
	}
	return parseStepsOf("clean", raw)
}

// parseStepsOf checks the schema of the steps of kind clean, service
// (both Ironic's _STEPS_SCHEMA) or deploy.
func parseStepsOf(kind string, raw []map[string]any) ([]protocol.Step, error) {
	if raw == nil {
		return nil, nil
	}
	deploy := kind == "deploy"
	out := make([]protocol.Step, 0, len(raw))
	for i, m := range raw {
		var st protocol.Step
		for k, v := range m {
			switch k {
			case "interface":
				s, _ := v.(string)
				if _, ok := protocol.InterfaceRank(s); !ok {
					return nil, badRequest("Invalid %s step %d: interface %v is not one of power, management, deploy, firmware, bios, raid", kind, i, v)
				}
				st.Interface = s
			case "step":
				s, _ := v.(string)
				if s == "" {
					return nil, badRequest("Invalid %s step %d: step must be a non-empty string", kind, i)
				}
				st.Step = s
			case "args":
				a, ok := v.(map[string]any)
				if !ok {
					return nil, badRequest("Invalid %s step %d: args must be an object", kind, i)
				}
				st.Args = a
			case "execute_on_child_nodes":
				b, ok := v.(bool)
				if !ok {
					return nil, badRequest("Invalid %s step %d: execute_on_child_nodes must be a boolean", kind, i)
				}
				st.ExecuteOnChildNodes = b
			case "limit_child_node_execution":
				list, ok := v.([]any)
				if !ok {
					return nil, badRequest("Invalid %s step %d: limit_child_node_execution must be a list", kind, i)
				}
				for _, e := range list {
					id, _ := e.(string)
					if !isUUIDLike(id) {
						// Ironic's text, which names the step
						return nil, badRequest("Invalid entry detected for execute_on_child_node parameter in step %v.", m["step"])
					}
					st.LimitChildNodeExecution = append(st.LimitChildNodeExecution, id)
				}
			case "priority":
				if !deploy {
					return nil, badRequest("Invalid %s step %d: unexpected key %q", kind, i, k)
				}
				p, ok := priority(v)
				if !ok {
					return nil, badRequest("Invalid deploy step %d: priority must be a non-negative integer", i)
				}
				st.Priority = p
			default:
				return nil, badRequest("Invalid %s step %d: unexpected key %q", kind, i, k)
			}
		}
		if st.Interface == "" || st.Step == "" {
			return nil, badRequest("Invalid %s step %d: interface and step are required", kind, i)
		}
		if deploy {
			for _, k := range []string{"args", "priority"} {
				if _, ok := m[k]; !ok {
					return nil, badRequest("Invalid deploy step %d: %s is required", i, k)
				}
			}
		}
		out = append(out, st)
	}
	return out, nil
}

func priority(v any) (int, bool) {
	switch p := v.(type) {
	case float64:
		if p >= 0 && p == float64(int(p)) {
			return int(p), true
		}
	case string:
		n, err := strconv.Atoi(p)
		if err == nil && n >= 0 {
			return n, true
		}
	}
	return 0, false
}
