"""Chat templates privft ships: SmolLM2-Instruct's own, and a training variant that marks its assistant turns.

The embedded model's GGUF carries `SMOLLM2_CHAT_TEMPLATE`. It has no ``{% generation %}``
markers, and trl cannot patch it, so trl's `assistant_only_loss` refuses it;
`SMOLLM2_TRAINING_CHAT_TEMPLATE` renders the same tokens with each assistant turn's content and
end-of-turn token inside the markers (trl then trains the model to stop).
"""

from __future__ import annotations

import copy

from transformers import PreTrainedTokenizerBase

SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SMOLLM2_TRAINING_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHAT_SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>")  # the tokens both templates write


def with_chat_template(tokenizer: PreTrainedTokenizerBase, template: str = SMOLLM2_CHAT_TEMPLATE
                       ) -> PreTrainedTokenizerBase:
    """A copy of `tokenizer` that knows the template's special tokens and renders conversations with `template`."""
    chat = copy.deepcopy(tokenizer)
    chat.add_special_tokens({"additional_special_tokens": list(CHAT_SPECIAL_TOKENS)})
    chat.chat_template = template
    return chat
