package art

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/grpo-dev/grpo/trainer"
)

// Model is the trainable model grpo registers with ART: ART's
// TrainableModel. Every call sends it in full, because ART builds its
// training service from the first call that needs one and reads the LoRA
// settings from that call's model.
type Model struct {
	Name      string // the model's name in ART; also vLLM's adapter name
	Project   string
	BaseModel string // a Hugging Face model id
	LoRA      trainer.LoRA
	// MaxSeqLength, when positive, caps ART's training sequence length
	// (init_args.max_seq_length; ART's default is 32768).
	MaxSeqLength int
}

// Validate reports the first field ART would refuse or misread.
func (m Model) Validate() error {
	switch {
	case m.Name == "":
		return fmt.Errorf("ART model: empty name")
	case strings.ContainsAny(m.Name, "/@"):
		// ART uses the name as a directory and, from 0.5.9, as "<name>@<step>".
		return fmt.Errorf("ART model name %q: must not contain / or @", m.Name)
	case m.Project == "":
		return fmt.Errorf("ART model %s: empty project", m.Name)
	case m.BaseModel == "":
		return fmt.Errorf("ART model %s: empty base_model", m.Name)
	case m.LoRA.Rank <= 0:
		return fmt.Errorf("ART model %s: lora rank %d: must be positive", m.Name, m.LoRA.Rank)
	case m.LoRA.Alpha <= 0 || m.LoRA.Alpha != math.Trunc(m.LoRA.Alpha) || m.LoRA.Alpha > math.MaxInt32:
		return fmt.Errorf("ART model %s: lora alpha %v: ART takes a positive whole number (peft_args.lora_alpha is an int)", m.Name, m.LoRA.Alpha)
	}
	return nil
}

// The wire shape of ART's TrainableModel as its own client sends it
// (model_dump() plus "_internal_config"). ART's server passes the JSON
// object to TrainableModel's __init__, which is how the private
// _internal_config reaches it.
type wireModel struct {
	Name           string         `json:"name"`
	Project        string         `json:"project"`
	Config         *struct{}      `json:"config"`
	BaseModel      string         `json:"base_model"`
	Trainable      bool           `json:"trainable"`
	InternalConfig internalConfig `json:"_internal_config"`
}

type internalConfig struct {
	InitArgs initArgs `json:"init_args"`
	PeftArgs peftArgs `json:"peft_args"`
}

// initArgs are Unsloth's from_pretrained arguments, merged by ART over its
// defaults (art/dev/get_model_config.py). max_lora_rank sizes vLLM's LoRA
// slots; ART's default of 8 fails every rank above it, so it is always sent
// as the rank.
type initArgs struct {
	MaxLoRARank  int `json:"max_lora_rank"`
	MaxSeqLength int `json:"max_seq_length,omitempty"`
}

type peftArgs struct {
	R             int      `json:"r"`
	LoraAlpha     int      `json:"lora_alpha"`
	TargetModules []string `json:"target_modules,omitempty"`
}

// MarshalJSON encodes the model as ART's TrainableModel.
func (m Model) MarshalJSON() ([]byte, error) {
	w := wireModel{
		Name:      m.Name,
		Project:   m.Project,
		BaseModel: m.BaseModel,
		Trainable: true,
		InternalConfig: internalConfig{
			InitArgs: initArgs{MaxLoRARank: m.LoRA.Rank, MaxSeqLength: m.MaxSeqLength},
			PeftArgs: peftArgs{
				R:             m.LoRA.Rank,
				LoraAlpha:     int(m.LoRA.Alpha),
				TargetModules: m.LoRA.TargetModules,
			},
		},
	}
	return json.Marshal(w)
}
