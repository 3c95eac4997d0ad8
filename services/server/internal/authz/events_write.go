package authz

// Appending events to a space (the HTTP API's stand-in for the sync write
// path). In a file of its own so the rule table stays the one place Allowed
// reads.

const (
	// ActionEventAppend appends events to a space: write on the space and
	// scope events:write.
	ActionEventAppend Action = "events.append"
	// ScopeEventsWrite lets a token append events.
	ScopeEventsWrite = "events:write"
)

func init() {
	rules[ActionEventAppend] = rule{right: RightWrite, scope: ScopeEventsWrite}
	knownScopes = append(knownScopes, ScopeEventsWrite)
}
