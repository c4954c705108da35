// Package rollout is the environment and the episodes played in it
// (DESIGN §2 and §3): Dining Philosophers at a table of n LLM agents, each
// with its own conversation and six tools.
//
// The package holds:
//   - the table and its rules (EnvConfig, Table, Mode): forks, meals,
//     simultaneous or sequential rounds, deadlock after DeadlockPatience
//     stuck rounds, seeded tie-breaks;
//   - what an agent sees and may do (SystemPrompt, the state line, Tools)
//     and how a sampled message becomes an action (Decide);
//   - the reward arithmetic (RewardFunc, Weights, Terms, Score): the
//     study's paper reward and the shaped default;
//   - playing episodes (Runner, RunAll, Limiter) through a Completer, the
//     one chat-completion method rollout needs from an inference client.
//
// An episode is determined by its EpisodeSpec: the same spec against a
// deterministic server plays the same episode. A server failure makes an
// Episode errored, never scored: failures are not rewards. Statistics over
// episodes live in grpo, held-out evaluation in evaluate.
package rollout
