// Package protocol is the wire contract between anvil-agent and anvil-controller.
//
// The agent pulls: it looks itself up (GET /v1/lookup) and then heartbeats
// (POST /v1/heartbeat/{node}); each heartbeat carries the agent's step
// catalogue, boot id and the status of its current command, and the reply
// carries the next command. No connection is ever opened towards the node.
//
// This package imports nothing of ours and holds no logic beyond decoding and
// validation, so both sides can depend on it without depending on each other.
package protocol
