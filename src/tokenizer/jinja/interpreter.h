// Executes a parsed template against a dict of variables. One Interpreter per render: it holds
// the scopes (jinja2 rules: a for-loop iteration, macro call, `with` and block `set` get their own
// scope; `if` does not) and the line of the node being evaluated, for error messages.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace dllm::jinja {

class Interpreter {
 public:
  // `variables` must be a dict; its entries are the template's global names.
  explicit Interpreter(Value variables);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Runs `body` and returns the rendered text. Throws TemplateError; line() then names the
  // template line of the node that failed.
  // `root_undefined`: the root frame's names that start out undefined (analyze_scopes).
  std::string render(const Body& body, const FrameLocals& root_undefined = {});
  int line() const { return line_; }

  // Evaluates `expr`, charging the result to the render's limits (limits.h).
  Value eval(const Expr& expr);
  Value call(const Value& callee, CallArgs& args);
  // Used by filters that take another filter or test by name (map, select, selectattr, ...).
  Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
  bool apply_test(std::string_view name, const Value& input, CallArgs& args);
  // Adds work to the render's budget; throws TemplateError naming the limit once it is spent.
  // Builtins whose work grows faster than their input (unique, dict(pairs)) charge their inner
  // steps here.
  void charge_steps(int64_t steps);
  void charge_bytes(uint64_t bytes);

 private:
  // Whether `target` is `from` or is inside it (charged to max_steps); see assign().
  bool reaches(const Value& from, const DictData& target);

  struct Scope {
    std::unordered_map<std::string, Value> variables;
    std::shared_ptr<Scope> parent;
  };
  using ScopePtr = std::shared_ptr<Scope>;
  enum class Flow { kNormal, kBreak, kContinue };
  class ScopeSwitch;

  Flow exec(const Body& body, std::string& out);
  Flow exec(const Stmt& stmt, std::string& out);
  Flow exec_for(const ForStmt& stmt, std::string& out);
  // A scope for a new frame, child of the current one, with the frame's locals preset undefined.
  ScopePtr child_scope(const FrameLocals& undefined) const;
  // Runs a block body (block set, filter block) into a string; a break or continue inside it
  // leaves the block (and, as in jinja2, discards its text).
  Flow render_block(const Body& body, const FrameLocals& undefined, std::string& text);
  void define_macro(const MacroStmt& macro);
  Value call_macro(const MacroStmt& macro, const ScopePtr& closure, CallArgs& args);
  void assign(const AssignTarget& target, const Value& value);

  Value eval_node(const Expr& expr);
  // Charges a value an expression produced: one step, its bytes, and the size limits.
  void account(const Value& value);
  // Appends rendered text, keeping the output under max_string_bytes.
  void emit(std::string& out, std::string_view text);

  Value lookup(const std::string& name) const;
  CallArgs eval_arguments(const Arguments& args);
  Value eval_filter_chain(const Expr& expr, const Value* block_input);
  Value eval_binary(const BinaryExpr& expr);
  Value eval_compare(const CompareExpr& expr);

  Value variables_;
  ScopePtr scope_;
  // Scopes that hold macros; a macro holds its scope, so the destructor breaks that cycle.
  std::vector<ScopePtr> macro_scopes_;
  int line_ = 0;
  int macro_depth_ = 0;
  int64_t steps_ = 0;
  uint64_t processed_bytes_ = 0;
};

}  // namespace dllm::jinja
