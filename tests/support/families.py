"""Chat templates in the shapes of today's model families, written here (not the models'
own files, which cannot be downloaded or copied): each teaches the markers its family's
model reads and writes (tool declarations, an earlier call, a tool result, earlier
reasoning, the generation prompt), which is what format detection and prompt rendering
depend on. tests/unit/engine/decoding/test_families.py checks what is detected from each;
tests/integration/engine/backends/test_families.py renders a conversation with each,
carried by a tiny model, on llama.cpp's and transformers' template engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coderai.engine.decoding.marked_calls import MARKERS


@dataclass(frozen=True)
class Family:
    #: the template's text
    template: str
    #: what is detected from it: the call format and the reasoning format
    tool_format: str
    reasoning_format: str
    #: fragments the rendering of CONVERSATION must hold, in this order
    rendered: list[str] = field(default_factory=list)
    #: whether its generation prompt opens the reasoning (the output starts inside it)
    opens: bool = False
    #: the tags its calls and its thinking are between, read from what it renders
    call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>")
    think_tags: tuple[str, str] = ("<think>", "</think>")


#: ChatML turns, as Qwen's templates write them
_QWEN_TURNS = (
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content or '' }}{% for c in m.tool_calls or [] %}CALL{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
)
_QWEN_TOOLS = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>"
    "\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\nDESCRIBE<|im_end|>\n"
    "{% endif %}"
)
_HERMES_CALL = (
    '<tool_call>\n{"name": "{{ c.function.name }}", "arguments": '
    "{{ c.function.arguments | tojson }}}\n</tool_call>"
)
_XML_CALL = (
    "<tool_call>\n<function={{ c.function.name }}>\n"
    "{% for k, v in c.function.arguments.items() %}<parameter={{ k }}>\n{{ v }}\n"
    "</parameter>\n{% endfor %}</function>\n</tool_call>"
)

QWEN3 = Family(
    _QWEN_TOOLS.replace("DESCRIBE", "Call a function in <tool_call></tool_call> tags.")
    + _QWEN_TURNS.replace("CALL", _HERMES_CALL)
    + "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}",
    "hermes",
    "think",
    [
        "<tools>",
        '"name": "get_weather"',
        "<think>\nThe user wants the weather.\n</think>",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}',
        "<tool_response>\nSunny\n</tool_response>",
        "<|im_start|>assistant\n",
    ],
)
QWEN3_CODER = Family(
    _QWEN_TOOLS.replace("DESCRIBE", "Call a function as <tool_call><function=NAME>.")
    + _QWEN_TURNS.replace("CALL", _XML_CALL).replace(
        "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}",
        "",
    )
    + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "qwen3_coder",
    "none",
    [
        "<tools>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>",
        "<tool_response>\nSunny\n</tool_response>",
    ],
)
MISTRAL = Family(
    "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
    "{% elif m.role == 'tool' %}[TOOL_RESULTS]"
    '{"content": {{ m.content | tojson }}, "call_id": "{{ m.tool_call_id }}"}[/TOOL_RESULTS]'
    "{% elif m.tool_calls %}[TOOL_CALLS]["
    "{% for c in m.tool_calls %}"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}, '
    '"id": "{{ c.id }}"}{% if not loop.last %}, {% endif %}{% endfor %}]</s>'
    "{% else %}{{ m.content }}</s>{% endif %}{% endfor %}",
    "mistral",
    "none",
    [
        "[AVAILABLE_TOOLS]",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}',
        '[TOOL_RESULTS]{"content": "Sunny"',
    ],
)
LLAMA3 = Family(
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>\n\n{{ m.content }}"
    "<|eot_id|>"
    "{% elif m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% for c in m.tool_calls %}"
    '{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}'
    "{% endfor %}<|eot_id|>"
    "{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{% if tools and m.role == 'user' %}Call a function by its JSON:"
    "\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}{{ m.content }}<|eot_id|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
    "llama3",
    "none",
    [
        '"name": "get_weather", "parameters": {"city": "Paris"}',
        "<|start_header_id|>ipython<|end_header_id|>\n\nSunny",
    ],
)
GLM45 = Family(
    "[gMASK]<sop>{% if tools %}<|system|>\n# Tools\n"
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|observation|><tool_response>{{ m.content }}</tool_response>"
    "{% elif m.role == 'assistant' %}<|assistant|>"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content or '' }}{% for c in m.tool_calls or [] %}{{ '\\n' }}<tool_call>"
    "{{ c.function.name }}{% for k, v in c.function.arguments.items() %}{{ '\\n' }}"
    "<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>{% endfor %}{{ '\\n' }}"
    "</tool_call>{% endfor %}"
    "{% else %}<|{{ m.role }}|>{{ m.content }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}",
    "glm45",
    "think",
    [
        "# Tools",
        "<think>The user wants the weather.</think>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>",
        "<|observation|><tool_response>Sunny</tool_response>",
    ],
)
_V31, _KIMI = MARKERS["deepseek_v31"], MARKERS["kimi_k2"]
#: DeepSeek-V3.1's template: its turns and calls, and no `tools` variable (it takes none)
DEEPSEEK_V31 = Family(
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<\uff5cUser\uff5c>{{ m.content }}"
    "{% elif m.role == 'tool' %}<\uff5ctool\u2581output\u2581begin\uff5c>{{ m.content }}"
    "<\uff5ctool\u2581output\u2581end\uff5c>"
    "{% elif m.role == 'assistant' %}<\uff5cAssistant\uff5c></think>{{ m.content or '' }}"
    f"{{% if m.tool_calls %}}{_V31.section}{{% for c in m.tool_calls %}}{_V31.begin}"
    f"{{{{ c.function.name }}}}{_V31.sep}{{{{ c.function.arguments | tojson }}}}{_V31.end}"
    f"{{% endfor %}}{_V31.section_end}{{% endif %}}"
    "<\uff5cend\u2581of\u2581sentence\uff5c>{% else %}{{ m.content }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<\uff5cAssistant\uff5c><think>{% endif %}",
    # without `tools` it is given the fallback prompt and read as Hermes; its entry's
    # tool_format option says deepseek_v31 (README)
    "hermes",
    "think",
    [
        "<tool_call>",  # the fallback prompt's way, in the system prompt and the call
        "<\uff5cAssistant\uff5c></think>",
        "<tool_response>\nSunny\n</tool_response>",
    ],
    opens=True,
)
#: DeepSeek-R1's: the answer opens in <think>; earlier turns' thinking dropped
DEEPSEEK_R1 = Family(
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<\uff5cUser\uff5c>{{ m.content }}"
    "{% elif m.role == 'assistant' %}<\uff5cAssistant\uff5c>"
    "{{ (m.content or '').split('</think>')[-1] }}<\uff5cend\u2581of\u2581sentence\uff5c>"
    "{% else %}{{ m.content }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<\uff5cAssistant\uff5c><think>\n{% endif %}",
    "hermes",
    "think",
    ["<tool_call>", "<\uff5cAssistant\uff5c><think>\n"],
    opens=True,
)
KIMI_K2 = Family(
    "{% if tools %}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_system|>tool<|im_middle|>## Return of {{ m.tool_call_id }}\n"
    "{{ m.content }}<|im_end|>"
    "{% elif m.role == 'assistant' %}<|im_assistant|>assistant<|im_middle|>"
    "{{ m.content or '' }}"
    f"{{% if m.tool_calls %}}{_KIMI.section}{{% for c in m.tool_calls %}}{_KIMI.begin}"
    f"functions.{{{{ c.function.name }}}}:{{{{ loop.index0 }}}}{_KIMI.sep}"
    f"{{{{ c.function.arguments | tojson }}}}{_KIMI.end}{{% endfor %}}{_KIMI.section_end}"
    "{% endif %}<|im_end|>"
    "{% else %}<|im_{{ m.role }}|>{{ m.role }}<|im_middle|>{{ m.content }}<|im_end|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}",
    "kimi_k2",
    "none",
    [
        "tool_declare",
        f"{_KIMI.begin}functions.get_weather:0{_KIMI.sep}" + '{"city": "Paris"}',
        "## Return of call_1\nSunny",
    ],
)
#: gpt-oss's: harmony's roles and channels, tools in a developer message, reasoning as
#: `thinking` until a final answer follows, one call per message
GPT_OSS = Family(
    "<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}\n"
    "# Valid channels: analysis, commentary, final.<|end|>"
    "{% if tools %}<|start|>developer<|message|># Tools\nnamespace functions {"
    "\n{% for t in tools %}type {{ t.function.name }} = (_: any) => any;\n{% endfor %}}"
    "<|end|>{% endif %}"
    "{% set ns = namespace(last='') %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|start|>user<|message|>{{ m.content }}<|end|>"
    "{% elif m.role == 'tool' %}<|start|>functions.{{ ns.last }} to=assistant"
    "<|channel|>commentary<|message|>{{ m.content | tojson }}<|end|>"
    "{% elif m.tool_calls %}"
    "{% if m.content and m.thinking %}{{ raise_exception('content and thinking') }}{% endif %}"
    "{% if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}"
    "<|end|>{% endif %}"
    "{% set c = m.tool_calls[0].function %}{% set ns.last = c.name %}"
    "<|start|>assistant to=functions.{{ c.name }}<|channel|>commentary json<|message|>"
    "{{ c.arguments | tojson }}<|call|>"
    "{% else %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}",
    "harmony",
    "harmony",
    [
        "Reasoning: medium",
        "type get_weather",
        "<|channel|>analysis<|message|>The user wants the weather.<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Paris"}<|call|>',
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"Sunny"',
    ],
)

#: a family no code here knows: JSON calls and thinking between tags of its own, which
#: are read from what its template renders (template_probe.py)
NOVEL = Family(
    "{% if tools %}<|system|>Tools: {{ tools | tojson }}\nCall one as "
    '<|act|>{"name": ..., "arguments": ...}<|/act|>{% endif %}'
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|result|>{{ m.content }}<|/result|>"
    "{% elif m.role == 'assistant' %}<|bot|>"
    "{% if m.reasoning_content %}<|ponder|>{{ m.reasoning_content }}<|/ponder|>{% endif %}"
    "{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<|act|>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "<|/act|>{% endfor %}<|eot|>"
    "{% else %}<|{{ m.role }}|>{{ m.content }}<|eot|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|bot|>{% endif %}",
    "hermes",
    "think",
    [
        "<|ponder|>The user wants the weather.<|/ponder|>",
        '<|act|>\n{"name": "get_weather", "arguments": {"city": "Paris"}}<|/act|>',
        "<|result|>Sunny<|/result|>",
    ],
    call_tags=("<|act|>", "<|/act|>"),
    think_tags=("<|ponder|>", "<|/ponder|>"),
)

FAMILIES = {
    "qwen3": QWEN3,
    "qwen3_coder": QWEN3_CODER,
    "mistral": MISTRAL,
    "llama3": LLAMA3,
    "glm45": GLM45,
    "deepseek_v31": DEEPSEEK_V31,
    "deepseek_r1": DEEPSEEK_R1,
    "kimi_k2": KIMI_K2,
    "gpt_oss": GPT_OSS,
    "novel": NOVEL,
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
#: a tool loop's conversation so far: a question, the model's reasoning and call, the
#: tool's result; the model's next turn is to be written
CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "The user wants the weather.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
]
