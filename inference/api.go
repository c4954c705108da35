// Package inference talks to OpenAI-compatible inference servers (vLLM,
// the embedded reference backend, any OpenAI-compatible API): chat
// completions that keep each sampled choice as the server returned it
// (ChatClient), LoRA adapter loading through vLLM's runtime API and model
// listing (AdminClient), health and back-pressure metrics; and Fleet, the
// replicas of one run as one completer and adapter loader that drains a
// replica that fails, readmits it with its adapters loaded, waits out an
// outage and adapts each replica's concurrency to its vLLM queue. Every request goes through
// internal/httpx, so ChatOptions.Retry and AdminOptions.Retry mean the
// same thing. This file holds the admin wire types; the reference backend
// serves the same ones.
package inference

// LoadAdapterRequest is the body of POST /v1/load_lora_adapter.
type LoadAdapterRequest struct {
	LoraName    string `json:"lora_name"`
	LoraPath    string `json:"lora_path"`
	LoadInplace bool   `json:"load_inplace,omitempty"`
}

// UnloadAdapterRequest is the body of POST /v1/unload_lora_adapter.
type UnloadAdapterRequest struct {
	LoraName string `json:"lora_name"`
}

// Model is one entry of GET /v1/models. Adapters carry Parent (the base
// model) and Root (the adapter path), as vLLM reports them.
type Model struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root,omitempty"`
	Parent  *string `json:"parent"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// ErrorBody is vLLM's error response body.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}
