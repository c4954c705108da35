package config

import (
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
)

// enums are the keys whose value is one of a few names, with those names:
// Parse refuses another value at its line and column, suggesting the
// nearest name, as it does an unknown key. Validate checks them too, for
// configs built in code.
var enums = map[string][]string{
	"env.mode":                   nameList(rollout.Modes),
	"reward.function":            nameList(rollout.RewardFuncs),
	"grpo.advantage.std":         nameList(grpo.Stds),
	"grpo.advantage.baseline":    nameList(grpo.Baselines),
	"inference.adapters.naming":  {NamingPerStep, NamingInplace},
	"inference.adapters.inplace": {InplaceAuto, InplaceLoad, InplaceReload},
	"trainer.kind":               {TrainerEmbedded, TrainerJobs, TrainerART},
	"validation.metric":          nameList(checkpoint.MetricNames),
	"validation.selection":       nameList(checkpoint.Policies),
}

func nameList[T ~string](names []T) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = string(n)
	}
	return out
}

// enum checks the scalar n at key path against the names the key accepts,
// if it is one of enums.
func (w *walker) enum(n *yaml.Node, path string) error {
	accepted, ok := enums[path]
	if !ok || n.Kind != yaml.ScalarNode {
		return nil
	}
	for _, a := range accepted {
		if n.Value == a {
			return nil
		}
	}
	list := strings.Join(accepted, ", ")
	if s := Nearest(n.Value, accepted); s != "" {
		return w.errorf(n, path, "%q is not accepted (did you mean %s?); accepted: %s", n.Value, s, list)
	}
	return w.errorf(n, path, "%q is not accepted; accepted: %s", n.Value, list)
}
