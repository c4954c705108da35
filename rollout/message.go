package rollout

import "encoding/json"

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// FinishLength is the finish reason of a turn the server cut at the token
// limit.
const FinishLength = "length"

// Message is one message of a conversation. Its JSON is an OpenAI chat
// message, the form transcripts carry (DESIGN §5) and requests send: the
// content is a string, or, when ContentParts is set, an array of parts.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content,omitempty"`
	Refusal string `json:"refusal,omitempty"`
	// ContentParts is an answer's content when the server sent it as
	// parts; Content is then empty.
	ContentParts     []ContentPart `json:"-"`
	ReasoningContent string        `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall    `json:"tool_calls,omitempty"`
	ToolCallID       string        `json:"tool_call_id,omitempty"`
}

// ContentPart is one part of a message's content.
type ContentPart struct {
	Type string `json:"type,omitempty"`
	Text string `json:"text,omitempty"`
}

// textMessage and partsMessage are Message's two JSON forms. Their fields
// are Message's, in its order, so the keys keep their places ("content"
// after "refusal" when it holds parts).
type (
	textMessage  Message
	partsMessage struct {
		Role             string        `json:"role"`
		Content          string        `json:"-"`
		Refusal          string        `json:"refusal,omitempty"`
		ContentParts     []ContentPart `json:"content,omitempty"`
		ReasoningContent string        `json:"reasoning_content,omitempty"`
		ToolCalls        []ToolCall    `json:"tool_calls,omitempty"`
		ToolCallID       string        `json:"tool_call_id,omitempty"`
	}
)

// MarshalJSON writes the content as a string, or as parts when there are
// any.
func (m Message) MarshalJSON() ([]byte, error) {
	if len(m.ContentParts) > 0 {
		return json.Marshal(partsMessage(m))
	}
	return json.Marshal(textMessage(m))
}

// ToolCall is one call of a tool in an assistant message.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function a ToolCall calls and its arguments, a
// JSON object as text.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// Tool is a function the model may call, as requests and trainer jobs
// list it: {"function":{...},"type":"function"}.
type Tool struct {
	Function Function `json:"function"`
	Type     string   `json:"type"`
}

// Function describes a tool's function; Parameters is its JSON schema.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Usage is the token count a completion reports.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// Choice is a sampled turn: the assistant message and why sampling
// stopped ("stop", "tool_calls", FinishLength).
type Choice struct {
	Message      Message
	FinishReason string
}
