#include "tokenizer/jinja/interpreter.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/limits.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

namespace {

template <class T>
const T& as(const Expr& expr) {
  return static_cast<const T&>(expr);
}
template <class T>
const T& as(const Stmt& stmt) {
  return static_cast<const T&>(stmt);
}

}  // namespace

// Makes `scope` current until destroyed, also when an error unwinds through it.
class Interpreter::ScopeSwitch {
 public:
  ScopeSwitch(Interpreter& interpreter, ScopePtr scope)
      : interpreter_(interpreter), saved_(std::move(interpreter.scope_)) {
    interpreter_.scope_ = std::move(scope);
  }
  ~ScopeSwitch() { interpreter_.scope_ = std::move(saved_); }

 private:
  Interpreter& interpreter_;
  ScopePtr saved_;
};

Interpreter::Interpreter(Value variables) : variables_(std::move(variables)) {}

Interpreter::~Interpreter() {
  for (const ScopePtr& scope : macro_scopes_) scope->variables.clear();
}

std::string Interpreter::render(const Body& body, const FrameLocals& root_undefined) {
  scope_ = std::make_shared<Scope>();
  for (const std::string& name : root_undefined)
    scope_->variables[name] = Value::undefined(cat("'", name, "' is undefined"));
  std::string out;
  exec(body, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, std::string& out) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = exec(*stmt, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

void Interpreter::charge_steps(int64_t steps) {
  steps_ += steps;
  if (steps_ > kMaxSteps)
    throw_error("template limit max_steps (", kMaxSteps,
                ") exceeded: the template runs too long (a huge or endless loop?)");
}

void Interpreter::charge_bytes(uint64_t bytes) {
  processed_bytes_ += bytes;
  if (processed_bytes_ > static_cast<uint64_t>(kMaxProcessedBytes))
    throw_error("template limit max_processed_bytes (", kMaxProcessedBytes,
                ") exceeded: the template builds or reads too much text");
}

void Interpreter::account(const Value& value) {
  charge_steps(1);
  if (value.is_string()) {
    check_string_bytes(value.as_string().size(), "a string");
    charge_bytes(value.as_string().size());
  } else if (value.is_list()) {
    check_list_items(value.as_list().items.size(), "a list");
    charge_bytes(value.as_list().items.size() * sizeof(Value));
  } else if (value.is_dict()) {
    check_list_items(value.as_dict().entries.size(), "a dict");
    charge_bytes(value.as_dict().entries.size() * 2 * sizeof(Value));
  }
}

void Interpreter::emit(std::string& out, std::string_view text) {
  check_string_bytes(uint64_t{out.size()} + text.size(), "the rendered text");
  charge_bytes(text.size());
  out += text;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, std::string& out) {
  line_ = stmt.line;
  charge_steps(1);
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      emit(out, as<TextStmt>(stmt).text);
      return Flow::kNormal;
    case Stmt::Kind::kOutput:
      emit(out, to_str(eval(*as<OutputStmt>(stmt).expr)));
      return Flow::kNormal;
    case Stmt::Kind::kIf: {
      const auto& node = as<IfStmt>(stmt);
      for (const auto& [condition, body] : node.branches)
        if (truthy(eval(*condition))) return exec(body, out);
      return exec(node.else_body, out);
    }
    case Stmt::Kind::kFor:
      return exec_for(as<ForStmt>(stmt), out);
    case Stmt::Kind::kSet: {
      const auto& node = as<SetStmt>(stmt);
      assign(node.target, eval(*node.value));
      return Flow::kNormal;
    }
    case Stmt::Kind::kSetBlock: {
      const auto& node = as<SetBlockStmt>(stmt);
      std::string text;
      if (const Flow flow = render_block(node.body, node.body_undefined, text);
          flow != Flow::kNormal)
        return flow;
      const Value value(std::move(text));
      assign(node.target, node.filter ? eval_filter_chain(*node.filter, &value) : value);
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      define_macro(as<MacroStmt>(stmt));
      return Flow::kNormal;
    case Stmt::Kind::kFilterBlock: {
      const auto& node = as<FilterBlockStmt>(stmt);
      std::string text;
      if (const Flow flow = render_block(node.body, node.body_undefined, text);
          flow != Flow::kNormal)
        return flow;
      const Value value(std::move(text));
      emit(out, to_str(eval_filter_chain(*node.filter, &value)));
      return Flow::kNormal;
    }
    case Stmt::Kind::kWith: {
      const auto& node = as<WithStmt>(stmt);
      ScopePtr scope = child_scope(node.body_undefined);
      std::vector<Value> values;
      for (const auto& assignment : node.assignments) values.push_back(eval(*assignment.second));
      ScopeSwitch switch_scope(*this, scope);
      for (size_t i = 0; i < values.size(); ++i) assign(node.assignments[i].first, values[i]);
      return exec(node.body, out);
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const ForStmt& stmt, std::string& out) {
  std::vector<Value> items = iterate(eval(*stmt.iterable));
  if (stmt.condition) {
    // `for x in xs if cond`: filter first, so loop.length/last count only the kept items.
    std::vector<Value> kept;
    for (Value& item : items) {
      auto scope = std::make_shared<Scope>();
      scope->parent = scope_;
      ScopeSwitch switch_scope(*this, scope);
      assign(stmt.target, item);
      if (truthy(eval(*stmt.condition))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const auto n = static_cast<int64_t>(items.size());
  // As in jinja2, `else` runs unless some iteration reached the end of the body: an empty loop,
  // or one whose iterations all ended in break / continue.
  bool completed_an_iteration = false;
  for (int64_t i = 0; i < n; ++i) {
    charge_steps(1);
    // Each iteration starts from a fresh scope: jinja2 does not carry `set` across iterations.
    ScopePtr scope = child_scope(stmt.body_undefined);
    Value loop = make_dict();
    DictData& info = loop.as_dict();
    info.entries = {{Value("index"), Value(i + 1)},    {Value("index0"), Value(i)},
                    {Value("revindex"), Value(n - i)}, {Value("revindex0"), Value(n - i - 1)},
                    {Value("first"), Value(i == 0)},   {Value("last"), Value(i == n - 1)},
                    {Value("length"), Value(n)},       {Value("depth"), Value(1)},
                    {Value("depth0"), Value(0)}};
    if (i > 0) info.entries.emplace_back(Value("previtem"), items[static_cast<size_t>(i - 1)]);
    if (i < n - 1) info.entries.emplace_back(Value("nextitem"), items[static_cast<size_t>(i + 1)]);
    info.entries.emplace_back(
        Value("cycle"), make_function("loop.cycle", [i](Interpreter&, CallArgs& args) {
          if (args.positional.empty()) throw_error("loop.cycle() needs at least one argument");
          return args.positional[static_cast<size_t>(i) % args.positional.size()];
        }));
    info.entries.emplace_back(Value("changed"),
                              make_function("loop.changed", [](Interpreter&, CallArgs&) -> Value {
                                throw_error("unsupported: loop.changed()");
                              }));
    scope->variables["loop"] = std::move(loop);
    ScopeSwitch switch_scope(*this, scope);
    assign(stmt.target, items[static_cast<size_t>(i)]);
    const Flow flow = exec(stmt.body, out);
    if (flow == Flow::kBreak) break;
    if (flow == Flow::kNormal) completed_an_iteration = true;
  }
  if (!completed_an_iteration && !stmt.else_body.empty()) {
    // The else block belongs to the enclosing loop, if any: a break there leaves that loop.
    ScopeSwitch switch_scope(*this, child_scope(stmt.else_undefined));
    return exec(stmt.else_body, out);
  }
  return Flow::kNormal;
}

Interpreter::ScopePtr Interpreter::child_scope(const FrameLocals& undefined) const {
  auto scope = std::make_shared<Scope>();
  scope->parent = scope_;
  for (const std::string& name : undefined)
    scope->variables[name] = Value::undefined(cat("'", name, "' is undefined"));
  return scope;
}

Interpreter::Flow Interpreter::render_block(const Body& body, const FrameLocals& undefined,
                                            std::string& text) {
  ScopeSwitch switch_scope(*this, child_scope(undefined));
  return exec(body, text);
}

void Interpreter::define_macro(const MacroStmt& macro) {
  ScopePtr closure = scope_;
  macro_scopes_.push_back(scope_);
  const MacroStmt* node = &macro;
  scope_->variables[macro.name] =
      make_function(macro.name, [node, closure](Interpreter& interpreter, CallArgs& args) {
        return interpreter.call_macro(*node, closure, args);
      });
}

Value Interpreter::call_macro(const MacroStmt& macro, const ScopePtr& closure, CallArgs& args) {
  if (macro_depth_ >= kMaxMacroDepth)
    throw_error("template limit max_macro_depth (", kMaxMacroDepth, ") exceeded: macro '",
                macro.name, "' recursed too deeply");
  const size_t n = macro.parameters.size();
  if (args.positional.size() > n)
    throw_error("macro '", macro.name, "' takes not more than ", n, " argument(s)");
  std::vector<std::optional<Value>> bound(n);
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < n && macro.parameters[i].first != key) ++i;
    if (i == n) throw_error("macro '", macro.name, "' takes no keyword argument '", key, "'");
    if (bound[i])
      throw_error("macro '", macro.name, "' got multiple values for argument '", key, "'");
    bound[i] = value;
  }
  auto scope = std::make_shared<Scope>();
  scope->parent = closure;
  for (const std::string& name : macro.body_undefined)
    scope->variables[name] = Value::undefined(cat("'", name, "' is undefined"));
  ScopeSwitch switch_scope(*this, scope);
  for (size_t i = 0; i < n; ++i) {
    const auto& [name, default_value] = macro.parameters[i];
    if (bound[i]) {
      scope->variables[name] = *bound[i];
    } else if (default_value) {
      scope->variables[name] = eval(*default_value);
    } else {
      scope->variables[name] = Value::undefined(cat("parameter '", name, "' was not provided"));
    }
  }
  const int call_line = line_;
  ++macro_depth_;
  std::string text;
  exec(macro.body, text);
  --macro_depth_;
  line_ = call_line;
  return Value(std::move(text));
}

// Whether `target` is `from` or sits anywhere inside it. A namespace attribute is the one place a
// template mutates a container, so refusing there keeps every value acyclic — a cycle of shared
// pointers would never be freed (found by fuzz_jinja_template: {% set ns.u = ns %}) and printing
// it would recurse without end. The walk is charged to max_steps: one step per container and per
// 64 of its elements, so walking big flat lists again and again still ends at the limit.
bool Interpreter::reaches(const Value& from, const DictData& target) {
  if (from.is_dict()) {
    const DictData& d = from.as_dict();
    if (&d == &target) return true;
    charge_steps(1 + static_cast<int64_t>(d.entries.size()) / 64);
    for (const auto& [key, v] : d.entries)
      if (reaches(v, target)) return true;
  } else if (from.is_list()) {
    const ListData& l = from.as_list();
    charge_steps(1 + static_cast<int64_t>(l.items.size()) / 64);
    for (const Value& v : l.items)
      if (reaches(v, target)) return true;
  }
  return false;
}

void Interpreter::assign(const AssignTarget& target, const Value& value) {
  if (!target.namespace_attribute.empty()) {
    const Value ns = lookup(target.names[0]);
    if (!ns.is_namespace())
      throw_error("cannot assign attribute '", target.namespace_attribute, "' on '",
                  target.names[0], "': it is not a namespace");
    if (target.namespace_attribute.front() == '_')
      throw_error("chat templates cannot store underscore-prefixed attributes on a namespace ('",
                  target.namespace_attribute, "')");
    if (reaches(value, ns.as_dict()))
      throw_error("cannot store '", target.names[0], "' inside itself (namespace attribute '",
                  target.namespace_attribute, "'): a value that contains itself never ends");
    ns.as_dict().set(Value(target.namespace_attribute), value);
    return;
  }
  if (!target.unpack) {
    scope_->variables[target.names[0]] = value;
    return;
  }
  if (value.is_undefined()) throw_undefined(value);
  const std::vector<Value> items = iterate(value);
  if (items.size() != target.names.size())
    throw_error(items.size() > target.names.size() ? "too many" : "not enough",
                " values to unpack (expected ", target.names.size(), ", got ", items.size(), ")");
  for (size_t i = 0; i < items.size(); ++i) scope_->variables[target.names[i]] = items[i];
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* scope = scope_.get(); scope; scope = scope->parent.get()) {
    const auto it = scope->variables.find(name);
    if (it != scope->variables.end()) return it->second;
  }
  if (const Value* value = variables_.as_dict().find(name)) return *value;
  if (auto global = find_global(name)) return *global;
  return Value::undefined(cat("'", name, "' is undefined"));
}

CallArgs Interpreter::eval_arguments(const Arguments& args) {
  CallArgs values;
  values.positional.reserve(args.positional.size());
  for (const ExprPtr& arg : args.positional) values.positional.push_back(eval(*arg));
  for (const auto& [key, arg] : args.keyword) values.keyword.emplace_back(key, eval(*arg));
  return values;
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) return callee.as_function().call(*this, args);
  if (callee.is_undefined()) throw_undefined(callee);
  throw_error("'", type_name(callee), "' object is not callable");
}

Value Interpreter::apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  const FilterDef* filter = find_filter(name);
  if (!filter) throw_error("unsupported filter '", name, "'");
  return filter->apply(*this, input, args);
}

bool Interpreter::apply_test(std::string_view name, const Value& input, CallArgs& args) {
  const TestDef* test = find_test(name);
  if (!test) throw_error("unsupported test '", name, "'");
  return test->apply(*this, input, args);
}

Value Interpreter::eval_filter_chain(const Expr& expr, const Value* block_input) {
  if (expr.kind != Expr::Kind::kFilter) return eval(expr);
  const auto& filter = as<FilterExpr>(expr);
  const Value input = filter.input ? eval_filter_chain(*filter.input, block_input) : *block_input;
  CallArgs args = eval_arguments(filter.args);
  line_ = filter.line;
  return filter.filter->apply(*this, input, args);
}

Value Interpreter::eval(const Expr& expr) {
  Value value = eval_node(expr);
  account(value);
  return value;
}

Value Interpreter::eval_node(const Expr& expr) {
  line_ = expr.line;
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return as<LiteralExpr>(expr).value;
    case Expr::Kind::kName:
      return lookup(as<NameExpr>(expr).name);
    case Expr::Kind::kList: {
      const auto& node = as<ListExpr>(expr);
      std::vector<Value> items;
      items.reserve(node.items.size());
      for (const ExprPtr& item : node.items) items.push_back(eval(*item));
      return make_list(std::move(items), node.is_tuple);
    }
    case Expr::Kind::kDict: {
      Value dict = make_dict();
      for (const auto& [key, value] : as<DictExpr>(expr).items) {
        Value k = eval(*key);
        dict.as_dict().set(k, eval(*value));
      }
      return dict;
    }
    case Expr::Kind::kAttribute: {
      const auto& node = as<AttributeExpr>(expr);
      const Value object = eval(*node.object);
      line_ = node.line;
      return get_attribute(object, node.name);
    }
    case Expr::Kind::kItem: {
      const auto& node = as<ItemExpr>(expr);
      const Value object = eval(*node.object);
      const Value index = eval(*node.index);
      line_ = node.line;
      return get_item(object, index);
    }
    case Expr::Kind::kSlice: {
      const auto& node = as<SliceExpr>(expr);
      const Value object = eval(*node.object);
      const Value start = node.start ? eval(*node.start) : Value::none();
      const Value stop = node.stop ? eval(*node.stop) : Value::none();
      const Value step = node.step ? eval(*node.step) : Value::none();
      line_ = node.line;
      return get_slice(object, start, stop, step);
    }
    case Expr::Kind::kCall: {
      const auto& node = as<CallExpr>(expr);
      const Value callee = eval(*node.callee);
      CallArgs args = eval_arguments(node.args);
      line_ = node.line;
      return call(callee, args);
    }
    case Expr::Kind::kFilter:
      return eval_filter_chain(expr, nullptr);
    case Expr::Kind::kTest: {
      const auto& node = as<TestExpr>(expr);
      const Value input = eval(*node.input);
      CallArgs args = eval_arguments(node.args);
      line_ = node.line;
      return Value(node.test->apply(*this, input, args) != node.negated);
    }
    case Expr::Kind::kUnary: {
      const auto& node = as<UnaryExpr>(expr);
      const Value operand = eval(*node.operand);
      line_ = node.line;
      switch (node.op) {
        case UnaryExpr::Op::kNot:
          return Value(!truthy(operand));
        case UnaryExpr::Op::kNegate:
          return negate(operand);
        case UnaryExpr::Op::kPlus:
          if (operand.is_undefined()) throw_undefined(operand);
          if (!operand.is_number())
            throw_error("bad operand type for unary +: '", type_name(operand), "'");
          return operand.is_bool() ? Value(operand.integral()) : operand;
      }
      break;
    }
    case Expr::Kind::kBinary:
      return eval_binary(as<BinaryExpr>(expr));
    case Expr::Kind::kCompare:
      return eval_compare(as<CompareExpr>(expr));
    case Expr::Kind::kConditional: {
      const auto& node = as<ConditionalExpr>(expr);
      if (truthy(eval(*node.condition))) return eval(*node.then_value);
      if (node.else_value) return eval(*node.else_value);
      return Value::undefined("the inline if-expression evaluated to false and has no else");
    }
  }
  throw_error("internal error: unknown expression");
}

Value Interpreter::eval_binary(const BinaryExpr& expr) {
  // `and` / `or` return an operand, like Python: {{ name or 'anonymous' }}.
  if (expr.op == BinaryExpr::Op::kAnd) {
    Value left = eval(*expr.lhs);
    return truthy(left) ? eval(*expr.rhs) : left;
  }
  if (expr.op == BinaryExpr::Op::kOr) {
    Value left = eval(*expr.lhs);
    return truthy(left) ? left : eval(*expr.rhs);
  }
  const Value left = eval(*expr.lhs);
  const Value right = eval(*expr.rhs);
  line_ = expr.line;
  return binary_operation(expr.op, left, right);
}

Value Interpreter::eval_compare(const CompareExpr& expr) {
  Value left = eval(*expr.first);
  for (const auto& [op, operand] : expr.rest) {
    Value right = eval(*operand);
    line_ = expr.line;
    // `in` and == on lists compare element by element: charge that work (in a loop it would
    // otherwise be quadratic without touching the step budget).
    if (right.is_list()) charge_steps(static_cast<int64_t>(right.as_list().items.size()));
    bool holds = false;
    switch (op) {
      case CompareExpr::Op::kEq:
        holds = equals(left, right);
        break;
      case CompareExpr::Op::kNe:
        holds = !equals(left, right);
        break;
      case CompareExpr::Op::kLt:
        holds = compare(left, right, "<") < 0;
        break;
      case CompareExpr::Op::kLe:
        holds = compare(left, right, "<=") <= 0;
        break;
      case CompareExpr::Op::kGt:
        holds = compare(left, right, ">") > 0;
        break;
      case CompareExpr::Op::kGe:
        holds = compare(left, right, ">=") >= 0;
        break;
      case CompareExpr::Op::kIn:
        holds = contains(right, left);
        break;
      case CompareExpr::Op::kNotIn:
        holds = !contains(right, left);
        break;
    }
    if (!holds) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace dllm::jinja
