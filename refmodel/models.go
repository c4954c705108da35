package refmodel

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/inference"
)

// BaseModelName is the served name of the base policy.
const BaseModelName = "refmodel"

// servedModel is the base or a loaded adapter.
type servedModel struct {
	name    string
	path    string // adapter directory; empty for the base
	created int64
	policy  *Policy
}

// modelRegistry holds the served models. Loaded policies are immutable; a
// reload swaps the pointer, so requests in flight finish on the old one.
type modelRegistry struct {
	w0     *Base // under every served adapter
	mu     sync.RWMutex
	base   *servedModel
	byName map[string]*servedModel
}

func newModelRegistry(base *Base) *modelRegistry {
	return &modelRegistry{
		w0:     base,
		base:   &servedModel{name: BaseModelName, created: time.Now().Unix(), policy: base.policy(nil)},
		byName: make(map[string]*servedModel),
	}
}

// get returns the model served under name, or nil.
func (m *modelRegistry) get(name string) *servedModel {
	if name == BaseModelName {
		return m.base
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.byName[name]
}

func (m *modelRegistry) list() inference.ModelList {
	m.mu.RLock()
	defer m.mu.RUnlock()
	l := inference.ModelList{Object: "list", Data: []inference.Model{{
		ID: BaseModelName, Object: "model", Created: m.base.created, OwnedBy: "vllm", Root: BaseModelName,
	}}}
	names := make([]string, 0, len(m.byName))
	for n := range m.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	parent := BaseModelName
	for _, n := range names {
		s := m.byName[n]
		l.Data = append(l.Data, inference.Model{
			ID: s.name, Object: "model", Created: s.created, OwnedBy: "vllm", Root: s.path, Parent: &parent,
		})
	}
	return l
}

func (b *Backend) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, b.models.list())
}

// handleLoadAdapter serves POST /v1/load_lora_adapter as vLLM does: 200
// with a plain-text body, 400 with vLLM's error body.
func (b *Backend) handleLoadAdapter(w http.ResponseWriter, r *http.Request) {
	var req inference.LoadAdapterRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		re := decodeError(err)
		writeVLLMError(w, http.StatusBadRequest, re.param, re.msg)
		return
	}
	if b.opts.Strict != nil {
		req.LoadInplace = false // as vLLM before the option existed
	}
	switch {
	case req.LoraName == "":
		writeVLLMError(w, http.StatusBadRequest, "lora_name", "lora_name: required")
		return
	case req.LoraPath == "":
		writeVLLMError(w, http.StatusBadRequest, "lora_path", "lora_path: required")
		return
	case req.LoraName == BaseModelName:
		writeVLLMError(w, http.StatusBadRequest, "lora_name", "lora_name: "+BaseModelName+" is the base model's name")
		return
	}
	if !req.LoadInplace && b.models.get(req.LoraName) != nil {
		writeVLLMError(w, http.StatusBadRequest, "lora_name", "The lora adapter '"+req.LoraName+
			"' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.")
		return
	}
	a, err := LoadAdapter(req.LoraPath)
	if err != nil && b.opts.Strict != nil && errors.Is(err, fs.ErrNotExist) {
		// Current vLLM: 404 NotFoundError, which grpo retries (the files
		// may not have appeared yet on a shared filesystem).
		writeVLLMError(w, http.StatusNotFound, "lora_path", "Loading lora "+req.LoraName+" failed: No adapter found for "+req.LoraPath)
		return
	}
	if err != nil {
		writeVLLMError(w, http.StatusBadRequest, "lora_path", "Loading lora "+req.LoraName+" failed: "+err.Error())
		return
	}
	pol, err := b.models.w0.Policy(a)
	if err != nil {
		writeVLLMError(w, http.StatusBadRequest, "lora_path", "Loading lora "+req.LoraName+" failed: "+err.Error()+
			" (serve it from a server started with its base: grpo refmodel serve --base-coordination)")
		return
	}
	s := &servedModel{name: req.LoraName, path: req.LoraPath, created: time.Now().Unix(), policy: pol}
	b.models.mu.Lock()
	_, exists := b.models.byName[req.LoraName]
	if exists && !req.LoadInplace {
		b.models.mu.Unlock()
		writeVLLMError(w, http.StatusBadRequest, "lora_name", "The lora adapter '"+req.LoraName+"' has already been loaded.")
		return
	}
	b.models.byName[req.LoraName] = s
	b.models.mu.Unlock()
	b.logger.Info("loaded adapter", "name", req.LoraName, "path", req.LoraPath, "inplace", exists)
	writeText(w, http.StatusOK, "Success: LoRA adapter '"+req.LoraName+"' added successfully.")
}

// handleUnloadAdapter serves POST /v1/unload_lora_adapter.
func (b *Backend) handleUnloadAdapter(w http.ResponseWriter, r *http.Request) {
	var req inference.UnloadAdapterRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		re := decodeError(err)
		writeVLLMError(w, http.StatusBadRequest, re.param, re.msg)
		return
	}
	if req.LoraName == "" {
		writeVLLMError(w, http.StatusBadRequest, "lora_name", "lora_name: required")
		return
	}
	b.models.mu.Lock()
	_, ok := b.models.byName[req.LoraName]
	delete(b.models.byName, req.LoraName)
	b.models.mu.Unlock()
	if !ok {
		writeVLLMError(w, http.StatusNotFound, "lora_name", "The lora adapter '"+req.LoraName+"' cannot be found.")
		return
	}
	b.logger.Info("unloaded adapter", "name", req.LoraName)
	writeText(w, http.StatusOK, "Success: LoRA adapter '"+req.LoraName+"' removed successfully.")
}
