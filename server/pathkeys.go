package server

import (
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/grpo-dev/grpo/config"
)

// pathKey returns the first key of a YAML (or JSON) config document that
// would choose a file path — run.db, or any key named like a path or a
// directory — or "" when there is none. Malformed documents are left to
// config.Parse, which names the error.
func pathKey(doc []byte) (string, error) {
	root, err := config.Document(doc)
	if err != nil || root == nil {
		return "", nil
	}
	var keys []string // the path to the node walked, joined only when found
	return findPathKey(root, &keys), nil
}

func findPathKey(n *yaml.Node, keys *[]string) string {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			*keys = append(*keys, key)
			if pathLike(key) {
				return strings.Join(*keys, ".")
			}
			if k := findPathKey(n.Content[i+1], keys); k != "" {
				return k
			}
			*keys = (*keys)[:len(*keys)-1]
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if k := findPathKey(c, keys); k != "" {
				return k
			}
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			return findPathKey(n.Alias, keys)
		}
	}
	return ""
}

// pathLike reports whether a config key names a file or directory.
func pathLike(key string) bool {
	k := strings.ToLower(key)
	switch k {
	case "db", "path", "dir", "file", "data_dir", "adapter_dir", "store":
		return true
	}
	for _, suffix := range []string{"_path", "_dir", "_file", "_db"} {
		if strings.HasSuffix(k, suffix) {
			return true
		}
	}
	return false
}
