package rollout

import "encoding/json"

// Tool names: the six actions a philosopher can take (DESIGN §2).
const (
	PickUpLeft   = "pick_up_left"
	PickUpRight  = "pick_up_right"
	PutDownLeft  = "put_down_left"
	PutDownRight = "put_down_right"
	Eat          = "eat"
	Think        = "think"
)

// Invalid is the action recorded for an output that is not exactly one
// well-formed call of a known tool.
const Invalid = "invalid"

// ToolNames lists the six tools in their canonical order. Other packages
// (the reference policy, metrics labels) index actions by this order.
var ToolNames = [6]string{PickUpLeft, PickUpRight, PutDownLeft, PutDownRight, Eat, Think}

// ToolIndex returns the position of name in ToolNames, or -1.
func ToolIndex(name string) int {
	for i, t := range ToolNames {
		if t == name {
			return i
		}
	}
	return -1
}

var toolDescriptions = [6]string{
	"Pick up the fork on your left (fork i). Fails if someone holds it or you already hold it.",
	"Pick up the fork on your right (fork (i+1) mod n). Fails if someone holds it or you already hold it.",
	"Put down the fork on your left. Fails if you do not hold it.",
	"Put down the fork on your right. Fails if you do not hold it.",
	"Eat one meal. Succeeds only if you hold both forks.",
	"Think: do nothing this round.",
}

// Tools returns the definitions of the six tools, each a function with no
// arguments.
func Tools() []Tool {
	tools := make([]Tool, len(ToolNames))
	for i, name := range ToolNames {
		tools[i] = Tool{
			Type: "function",
			Function: Function{
				Name:        name,
				Description: toolDescriptions[i],
				Parameters:  json.RawMessage(`{"type":"object","properties":{}}`),
			},
		}
	}
	return tools
}
