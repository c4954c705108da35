package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Peers are the inference endpoints and trainers a daemon's operator
// declares (grpo serve --peers FILE): a config posted to the daemon names
// them (inference.endpoints: [{peer: vllm-a}], trainer: {peer: art-1}) and
// cannot choose which environment variables the daemon reads. The file:
//
//	inference:
//	  vllm-a: {url: http://10.0.0.5:8000/v1, api_key_env: VLLM_A_KEY}
//	trainers:
//	  jobs-1: {url: http://10.0.0.6:7000, kind: jobs, api_key_env: JOBS_1_KEY}
type Peers struct {
	Inference map[string]PeerEndpoint `yaml:"inference"`
	Trainers  map[string]PeerTrainer  `yaml:"trainers"`
}

// PeerEndpoint is one declared inference endpoint.
type PeerEndpoint struct {
	URL       string `yaml:"url"`
	APIKeyEnv string `yaml:"api_key_env"` // "": no key is sent
}

// PeerTrainer is one declared trainer.
type PeerTrainer struct {
	URL       string `yaml:"url"`
	Kind      string `yaml:"kind"`        // default jobs
	APIKeyEnv string `yaml:"api_key_env"` // kind jobs only; "": no key is sent
}

var peerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// peerField and peerType find the Go type names in yaml's errors, which
// mean nothing to the file's author.
var (
	peerField = regexp.MustCompile(`field (\S+) not found in type config\.\w+`)
	peerType  = regexp.MustCompile(`map\[string\]config\.\w+|config\.\w+`)
)

// LoadPeers reads and checks a peers file.
func LoadPeers(path string) (Peers, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Peers{}, fmt.Errorf("read peers file: %w", err)
	}
	p, err := ParsePeers(data)
	if err != nil {
		return Peers{}, fmt.Errorf("peers file %s: %w", path, err)
	}
	return p, nil
}

// ParsePeers decodes and checks a peers document: unknown keys, bad names,
// URLs and variable names are errors naming the peer.
func ParsePeers(data []byte) (Peers, error) {
	var p Peers
	if err := CheckAliases(data); err != nil {
		return p, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = peerField.ReplaceAllString(msg, "unknown key $1")
		msg = peerType.ReplaceAllString(msg, "a map of peers by name")
		return p, fmt.Errorf("%s (want inference: {NAME: {url, api_key_env}}, trainers: {NAME: {url, kind, api_key_env}})", msg)
	}
	for _, name := range sortedKeys(p.Inference) {
		e := p.Inference[name]
		if !peerName.MatchString(name) {
			return p, fmt.Errorf("inference peer %q: a name is 1 to 64 letters, digits, '.', '_' or '-'", name)
		}
		if err := httpURL(e.URL); err != nil {
			return p, fmt.Errorf("inference peer %s: url: %w", name, err)
		}
		if e.APIKeyEnv != "" && !envVarName.MatchString(e.APIKeyEnv) {
			return p, fmt.Errorf("inference peer %s: api_key_env %q is not an environment variable name", name, e.APIKeyEnv)
		}
	}
	for _, name := range sortedKeys(p.Trainers) {
		t := p.Trainers[name]
		if !peerName.MatchString(name) {
			return p, fmt.Errorf("trainer peer %q: a name is 1 to 64 letters, digits, '.', '_' or '-'", name)
		}
		if err := httpURL(t.URL); err != nil {
			return p, fmt.Errorf("trainer peer %s: url: %w", name, err)
		}
		if t.Kind == "" {
			t.Kind = TrainerJobs
			p.Trainers[name] = t
		}
		if t.Kind != TrainerJobs && t.Kind != TrainerART {
			return p, fmt.Errorf("trainer peer %s: kind %q is not accepted; accepted: %s, %s", name, t.Kind, TrainerJobs, TrainerART)
		}
		if t.APIKeyEnv != "" && !envVarName.MatchString(t.APIKeyEnv) {
			return p, fmt.Errorf("trainer peer %s: api_key_env %q is not an environment variable name", name, t.APIKeyEnv)
		}
		if t.APIKeyEnv != "" && t.Kind != TrainerJobs {
			return p, fmt.Errorf("trainer peer %s: api_key_env is sent to the job API only (kind %s), not to kind %s", name, TrainerJobs, t.Kind)
		}
	}
	return p, nil
}

// APIKeyEnvs lists the environment variables the peers name, sorted.
func (p Peers) APIKeyEnvs() []string {
	var out []string
	for _, e := range p.Inference {
		if e.APIKeyEnv != "" && !slices.Contains(out, e.APIKeyEnv) {
			out = append(out, e.APIKeyEnv)
		}
	}
	for _, t := range p.Trainers {
		if t.APIKeyEnv != "" && !slices.Contains(out, t.APIKeyEnv) {
			out = append(out, t.APIKeyEnv)
		}
	}
	sort.Strings(out)
	return out
}

// ResolveOptions say what a posted config may name besides declared peers.
type ResolveOptions struct {
	// PeersOnly refuses any inference or trainer URL the config names
	// itself: only declared peers are reached.
	PeersOnly bool
}

// ResolvePeers replaces the peer names of a posted config with the
// declared URLs and key variables. An endpoint the config names by URL is
// accepted only without credentials (it may not set api_key_env, and gets
// NoAPIKey so that no default key is sent either), and not at all with
// PeersOnly. Errors are *Error values naming the key.
func ResolvePeers(cfg *Config, p Peers, o ResolveOptions) error {
	for i := range cfg.Inference.Endpoints {
		e := &cfg.Inference.Endpoints[i]
		key := fmt.Sprintf("inference.endpoints[%d]", i)
		if e.Peer != "" {
			if e.URL != "" || e.APIKeyEnv != "" {
				return invalid(key, "names peer %q and also url or api_key_env; give only the peer", e.Peer)
			}
			d, ok := p.Inference[e.Peer]
			if !ok {
				return invalid(key+".peer", "%q is not a declared inference peer; declared: %s", e.Peer, list(sortedKeys(p.Inference)))
			}
			e.URL, e.APIKeyEnv, e.Peer = d.URL, d.APIKeyEnv, ""
			if e.APIKeyEnv == "" {
				e.APIKeyEnv = NoAPIKey
			}
			continue
		}
		if o.PeersOnly {
			return invalid(key+".url", "this daemon reaches declared peers only (--peers-only): name one with {peer: NAME}; declared: %s", list(sortedKeys(p.Inference)))
		}
		if e.APIKeyEnv != "" {
			return invalid(key+".api_key_env", "a posted config cannot choose which environment variables the daemon reads: declare the endpoint in the daemon's peers file and name it with {peer: NAME}")
		}
		e.APIKeyEnv = NoAPIKey
	}
	t := &cfg.Trainer
	if t.Peer != "" {
		if t.APIKeyEnv != "" {
			return invalid("trainer", "names peer %q and also api_key_env; give only the peer", t.Peer)
		}
		d, ok := p.Trainers[t.Peer]
		if !ok {
			return invalid("trainer.peer", "%q is not a declared trainer peer; declared: %s", t.Peer, list(sortedKeys(p.Trainers)))
		}
		t.URL, t.Kind, t.APIKeyEnv, t.Peer = d.URL, d.Kind, d.APIKeyEnv, ""
		return nil
	}
	if t.APIKeyEnv != "" {
		return invalid("trainer.api_key_env", "a posted config cannot choose which environment variables the daemon reads: declare the trainer in the daemon's peers file and name it with trainer: {peer: NAME}")
	}
	if o.PeersOnly && t.Kind != TrainerEmbedded {
		return invalid("trainer.url", "this daemon reaches declared peers only (--peers-only): name a trainer with trainer: {peer: NAME}; declared: %s", list(sortedKeys(p.Trainers)))
	}
	return nil
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
