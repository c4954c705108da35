"""The chat template: ChatML turns, the tools listed in the system turn, and
hermes-style calls, `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
which is what vLLM's `hermes` tool parser extracts (a JSON object between the
two tags, or after an unclosed opening tag). Tool results come back as a user
turn of `<tool_response>` blocks, as in Qwen's templates."""

CHAT_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' %}"
    "{%- set sys = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set sys = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if sys or tools %}"
    "{{- '<|im_start|>system\\n' + sys }}"
    "{%- if tools %}"
    "{{- '\\n\\n# Tools\\n<tools>' }}"
    "{%- for tool in tools %}"
    "{%- set f = tool.function if tool.function is defined else tool %}"
    "{{- '\\n{\"name\": ' + (f.name | tojson) + ', \"description\": ' + ((f.description or '') | tojson) + '}' }}"
    "{%- endfor %}"
    "{{- '\\n</tools>\\nCall exactly one function per reply, as <tool_call>\\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>\' }}'
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if m.content %}{{- m.content }}{%- endif %}"
    "{%- if m.tool_calls %}"
    "{%- for tc in m.tool_calls %}"
    "{%- set f = tc.function if tc.function is defined else tc %}"
    "{%- if not loop.first or m.content %}{{- '\\n' }}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + f.name + \'", "arguments": \' }}'
    "{%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but not special, as in Qwen's tokenizers: kept when decoding, so the
# hermes parser sees them in the text.
TAG_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
