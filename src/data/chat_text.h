// A conversation → TrainingText: the chat template's rendering, and the byte ranges the assistant
// produces in it.
//
// The text is apply_chat_template(messages, add_generation_prompt=False), exactly. Which part of
// it the assistant produces is decided per assistant message i, from the template itself:
//
// * Templates with transformers' {% generation %} tags say it: their spans are the trained ranges
//   (as return_assistant_tokens_mask would have them).
// * Otherwise, the turn of message i is the output the template writes while one of its loops
//   visits message i's dict (jinja_template.h: output attribution), from the first such byte to the
//   last. The generation prompt G_i is what apply_chat_template(messages[:i],
//   add_generation_prompt=True) writes after the output of messages[:i] (the header the model is
//   given before it speaks, e.g. "<|im_start|>assistant\n"). The trained range starts after the
//   longest prefix of the turn that equals a prefix of G_i, and ends right after the last stop
//   string in the turn (the eos token, or the model's other end-of-turn tokens such as <|eot_id|>
//   or <|im_end|>): glue after it, like ChatML's "\n", is not produced by the model. A turn without
//   a stop string is trained to its end and followed by an eos token (the template did not end it).
//
// This is exact on Llama 3/3.1, Qwen 2.5/3 (including Qwen3's think blocks: earlier turns lose
// their reasoning, the last turn trains "<think>...</think>\n\n" + content, and with
// enable_thinking=False the empty think block counts as prompt) and Mistral ([INST] ... [/INST] +
// " content</s>"). With train_on_prompt, every token is trained, and the eos tokens above are still
// inserted.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "data/training_text.h"
#include "tokenizer/chat_template.h"

namespace ferry {

struct ChatTextOptions {
  ChatRenderOptions render;               // template variables; add_generation_prompt is ignored
  std::vector<std::string> stop_strings;  // end-of-turn texts of the model (see above); not empty
  bool train_on_prompt = false;
  // Assistant messages before this index are context (a prompt/completion record's prompt part).
  size_t first_trained_message = 0;
};

// Throws ferry::Error when the template fails (e.g. raise_exception on roles it does not accept), or
// when an assistant message cannot be found in its output.
TrainingText chat_training_text(const ChatTemplate& chat_template, const jinja::Value& messages,
                                const ChatTextOptions& options);

}  // namespace ferry
