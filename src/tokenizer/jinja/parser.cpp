#include "tokenizer/jinja/parser.h"

#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

namespace {

// Tags jinja2 knows that we deliberately do not implement.
constexpr std::string_view kUnsupportedTags[] = {"include", "import",   "from",       "extends",
                                                 "block",   "call",     "autoescape", "do",
                                                 "trans",   "pluralize"};
constexpr int kMaxExpressionDepth = 200;
constexpr int kMaxBlockDepth = 200;  // nested blocks; real templates use a handful

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kText:
      return "template text";
    case TokenType::kVariableBegin:
      return "'{{'";
    case TokenType::kVariableEnd:
      return "end of print statement '}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "end of statement block '%}'";
    case TokenType::kName:
      return "'" + token.text + "'";
    case TokenType::kString:
      return "string literal";
    case TokenType::kInteger:
      return "integer literal";
    case TokenType::kFloat:
      return "float literal";
    case TokenType::kOperator:
      return "'" + token.text + "'";
    case TokenType::kEnd:
      return "end of template";
  }
  return "token";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_template() {
    std::string matched;
    return parse_body({}, matched, "", 0);
  }

 private:
  // ---- token helpers ----
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& token = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return token;
  }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kOperator && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kName && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void unexpected(std::string_view expected) const {
    throw_syntax_error(peek().line, "expected ", expected, ", got ", describe(peek()));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) unexpected(cat("'", op, "'"));
  }
  std::string expect_name(std::string_view what) {
    if (peek().type != TokenType::kName) unexpected(what);
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != TokenType::kBlockEnd) unexpected("end of statement block '%}'");
    next();
  }

  // ---- statements ----

  // Parses until a block tag named in `end_tags` and consumes that tag's name (the caller parses
  // the rest of it, e.g. the condition of an `elif`). With no end tags, parses to the end.
  Body parse_body(std::initializer_list<std::string_view> end_tags, std::string& matched,
                  std::string_view opener, int opener_line) {
    Body body;
    while (true) {
      const Token& token = peek();
      switch (token.type) {
        case TokenType::kEnd:
          if (end_tags.size() == 0) return body;
          throw_syntax_error(opener_line, "'", opener, "' tag is never closed (expected '",
                             *std::prev(end_tags.end()), "')");
        case TokenType::kText:
          body.push_back(std::make_unique<TextStmt>(token.line, token.text));
          next();
          break;
        case TokenType::kVariableBegin: {
          next();
          const int line = peek().line;
          ExprPtr expr = parse_tuple(true, false);
          if (peek().type != TokenType::kVariableEnd) unexpected("end of print statement '}}'");
          next();
          body.push_back(std::make_unique<OutputStmt>(line, std::move(expr)));
          break;
        }
        case TokenType::kBlockBegin: {
          next();
          const Token& tag = peek();
          if (tag.type == TokenType::kName &&
              std::find(end_tags.begin(), end_tags.end(), tag.text) != end_tags.end()) {
            matched = tag.text;
            next();
            return body;
          }
          body.push_back(parse_statement());
          break;
        }
        default:
          unexpected("template text or a tag");
      }
    }
  }

  StmtPtr parse_statement() {
    struct BlockDepthGuard {
      explicit BlockDepthGuard(Parser& p) : parser(p) {
        if (++parser.block_depth_ > kMaxBlockDepth)
          throw_syntax_error(parser.peek().line, "blocks nested too deeply");
      }
      ~BlockDepthGuard() { --parser.block_depth_; }
      Parser& parser;
    } guard(*this);
    const Token& tag = peek();
    if (tag.type != TokenType::kName) unexpected("a tag name");
    const std::string name = tag.text;
    const int line = tag.line;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "filter") return parse_filter_block();
    if (name == "with") return parse_with("with", "endwith");
    if (name == "generation") return parse_with("generation", "endgeneration");
    if (name == "print") {
      next();
      auto stmt = std::make_unique<OutputStmt>(line, parse_tuple(true, false));
      expect_block_end();
      return stmt;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) throw_syntax_error(line, "'", name, "' outside of a for loop");
      next();
      expect_block_end();
      return std::make_unique<LoopControlStmt>(
          line, name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue);
    }
    if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), name) !=
        std::end(kUnsupportedTags))
      throw_syntax_error(line, "unsupported tag '", name, "'");
    if (name.rfind("end", 0) == 0 || name == "else" || name == "elif")
      throw_syntax_error(line, "unexpected tag '", name, "' (no open block it could close)");
    throw_syntax_error(line, "unknown tag '", name, "'");
  }

  StmtPtr parse_if() {
    auto stmt = std::make_unique<IfStmt>(next().line);
    std::string matched = "elif";
    while (matched == "elif") {
      ExprPtr condition = parse_tuple(false, false);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"}, matched, "if", stmt->line);
      stmt->branches.emplace_back(std::move(condition), std::move(body));
    }
    if (matched == "else") {
      expect_block_end();
      stmt->else_body = parse_body({"endif"}, matched, "if", stmt->line);
    }
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_for() {
    auto stmt = std::make_unique<ForStmt>(next().line);
    stmt->target = parse_assign_target(false);
    if (!skip_name("in")) unexpected("'in'");
    stmt->iterable = parse_tuple(false, false);
    if (skip_name("if")) stmt->condition = parse_expression(true);
    if (is_name("recursive")) throw_syntax_error(peek().line, "unsupported: recursive for loops");
    expect_block_end();
    std::string matched;
    ++loop_depth_;
    stmt->body = parse_body({"else", "endfor"}, matched, "for", stmt->line);
    --loop_depth_;
    if (matched == "else") {
      expect_block_end();
      stmt->else_body = parse_body({"endfor"}, matched, "for", stmt->line);
    }
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_set() {
    const int line = next().line;
    AssignTarget target = parse_assign_target(true);
    if (skip_op("=")) {
      auto stmt = std::make_unique<SetStmt>(line, std::move(target), parse_tuple(true, false));
      expect_block_end();
      return stmt;
    }
    auto stmt = std::make_unique<SetBlockStmt>(line, std::move(target));
    if (is_op("|")) stmt->filter = parse_filters(nullptr, false);
    expect_block_end();
    std::string matched;
    stmt->body = parse_body({"endset"}, matched, "set", line);
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_macro() {
    const int line = next().line;
    auto stmt = std::make_unique<MacroStmt>(line, expect_name("a macro name"));
    expect_op("(");
    while (!skip_op(")")) {
      if (!stmt->parameters.empty()) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      std::string parameter = expect_name("a parameter name");
      ExprPtr default_value;
      if (skip_op("=")) {
        default_value = parse_expression(true);
      } else if (!stmt->parameters.empty() && stmt->parameters.back().second) {
        throw_syntax_error(line, "non-default argument follows default argument");
      }
      stmt->parameters.emplace_back(std::move(parameter), std::move(default_value));
    }
    expect_block_end();
    const int outer_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string matched;
    stmt->body = parse_body({"endmacro"}, matched, "macro", line);
    loop_depth_ = outer_loop_depth;
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_filter_block() {
    const int line = next().line;
    auto stmt = std::make_unique<FilterBlockStmt>(line);
    stmt->filter = parse_filters(nullptr, true);
    expect_block_end();
    std::string matched;
    stmt->body = parse_body({"endfilter"}, matched, "filter", line);
    expect_block_end();
    return stmt;
  }

  // `with` and Hugging Face's `generation` both render their body in a scope of its own.
  StmtPtr parse_with(std::string_view tag, std::string_view end_tag) {
    const int line = next().line;
    auto stmt = std::make_unique<WithStmt>(line);
    while (peek().type != TokenType::kBlockEnd) {
      if (tag != "with") unexpected("end of statement block '%}'");
      if (!stmt->assignments.empty()) expect_op(",");
      AssignTarget target = parse_assign_target(false);
      expect_op("=");
      stmt->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    std::string matched;
    stmt->body = parse_body({end_tag}, matched, tag, line);
    expect_block_end();
    return stmt;
  }

  // name | name, name | (name, name) | ns.attribute (when allowed)
  AssignTarget parse_assign_target(bool allow_namespace) {
    AssignTarget target;
    if (allow_namespace && peek().type == TokenType::kName && is_op(".", 1)) {
      target.names.push_back(next().text);
      next();
      target.namespace_attribute = expect_name("an attribute name");
      return target;
    }
    const bool parenthesized = skip_op("(");
    target.names.push_back(expect_name("a variable name"));
    while (skip_op(",")) {
      target.unpack = true;
      if (peek().type != TokenType::kName || is_name("in")) break;
      target.names.push_back(next().text);
    }
    if (parenthesized) {
      expect_op(")");
      target.unpack = true;
    }
    return target;
  }

  // ---- expressions (jinja2's precedence, loosest first) ----

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.expression_depth_ > kMaxExpressionDepth)
        throw_syntax_error(parser.peek().line, "expression nested too deeply");
    }
    ~DepthGuard() { --parser.expression_depth_; }
    Parser& parser;
  };

  // Comma-separated expressions: one expression, or a tuple if a comma appears.
  ExprPtr parse_tuple(bool with_conditional, bool explicit_parentheses) {
    const int line = peek().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      const Token& token = peek();
      if (token.type == TokenType::kVariableEnd || token.type == TokenType::kBlockEnd ||
          is_op(")") ||
          (!items.empty() && token.type == TokenType::kName &&
           (token.text == "if" || token.text == "recursive")))
        break;
      items.push_back(parse_expression(with_conditional));
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (items.size() == 1) return std::move(items.front());
      if (!explicit_parentheses) unexpected("an expression");
    }
    auto tuple = std::make_unique<ListExpr>(line, true);
    tuple->items = std::move(items);
    return tuple;
  }

  ExprPtr parse_expression(bool with_conditional) {
    DepthGuard guard(*this);
    return with_conditional ? parse_conditional() : parse_or();
  }

  ExprPtr parse_conditional() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      ExprPtr condition = parse_or();
      ExprPtr else_value;
      if (skip_name("else")) else_value = parse_conditional();
      expr = std::make_unique<ConditionalExpr>(line, std::move(condition), std::move(expr),
                                               std::move(else_value));
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, BinaryExpr::Op::kOr, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, BinaryExpr::Op::kAnd, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      return std::make_unique<UnaryExpr>(line, UnaryExpr::Op::kNot, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    std::vector<std::pair<CompareExpr::Op, ExprPtr>> rest;
    while (true) {
      static const std::pair<std::string_view, CompareExpr::Op> kOps[] = {
          {"==", CompareExpr::Op::kEq}, {"!=", CompareExpr::Op::kNe}, {"<", CompareExpr::Op::kLt},
          {"<=", CompareExpr::Op::kLe}, {">", CompareExpr::Op::kGt},  {">=", CompareExpr::Op::kGe}};
      std::optional<CompareExpr::Op> op;
      for (const auto& [text, value] : kOps)
        if (is_op(text)) op = value;
      if (op) {
        next();
      } else if (is_name("in")) {
        next();
        op = CompareExpr::Op::kIn;
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = CompareExpr::Op::kNotIn;
      } else {
        break;
      }
      rest.emplace_back(*op, parse_math1());
    }
    if (rest.empty()) return first;
    auto compare = std::make_unique<CompareExpr>(line, std::move(first));
    compare->rest = std::move(rest);
    return compare;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      const auto kind = op.text == "+" ? BinaryExpr::Op::kAdd : BinaryExpr::Op::kSub;
      left = std::make_unique<BinaryExpr>(op.line, kind, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, BinaryExpr::Op::kConcat, std::move(left),
                                          parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      const auto kind = op.text == "*"    ? BinaryExpr::Op::kMul
                        : op.text == "/"  ? BinaryExpr::Op::kDiv
                        : op.text == "//" ? BinaryExpr::Op::kFloorDiv
                                          : BinaryExpr::Op::kMod;
      left = std::make_unique<BinaryExpr>(op.line, kind, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {  // left-associative in jinja2, unlike Python
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(line, BinaryExpr::Op::kPow, std::move(left),
                                          parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filters) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      const auto kind = op.text == "-" ? UnaryExpr::Op::kNegate : UnaryExpr::Op::kPlus;
      node = std::make_unique<UnaryExpr>(op.line, kind, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filters) node = parse_filter_expression(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = peek();
    const int line = token.line;
    switch (token.type) {
      case TokenType::kName: {
        next();
        if (token.text == "true" || token.text == "True")
          return std::make_unique<LiteralExpr>(line, Value(true));
        if (token.text == "false" || token.text == "False")
          return std::make_unique<LiteralExpr>(line, Value(false));
        if (token.text == "none" || token.text == "None")
          return std::make_unique<LiteralExpr>(line, Value::none());
        return std::make_unique<NameExpr>(line, token.text);
      }
      case TokenType::kString: {
        std::string text;
        while (peek().type == TokenType::kString) text += next().text;  // 'a' 'b' == 'ab'
        return std::make_unique<LiteralExpr>(line, Value(std::move(text)));
      }
      case TokenType::kInteger:
        next();
        return std::make_unique<LiteralExpr>(line, Value(token.integer));
      case TokenType::kFloat:
        next();
        return std::make_unique<LiteralExpr>(line, Value(token.number));
      case TokenType::kOperator:
        if (token.text == "(") {
          next();
          ExprPtr expr = parse_tuple(true, true);
          expect_op(")");
          return expr;
        }
        if (token.text == "[") return parse_list();
        if (token.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    unexpected("an expression");
  }

  ExprPtr parse_list() {
    auto list = std::make_unique<ListExpr>(next().line, false);
    while (!skip_op("]")) {
      if (!list->items.empty()) {
        expect_op(",");
        if (skip_op("]")) break;
      }
      list->items.push_back(parse_expression(true));
    }
    return list;
  }

  ExprPtr parse_dict() {
    auto dict = std::make_unique<DictExpr>(next().line);
    while (!skip_op("}")) {
      if (!dict->items.empty()) {
        expect_op(",");
        if (skip_op("}")) break;
      }
      ExprPtr key = parse_expression(true);
      expect_op(":");
      dict->items.emplace_back(std::move(key), parse_expression(true));
    }
    return dict;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        const int line = peek().line;
        auto call = std::make_unique<CallExpr>(line, std::move(node));
        call->args = parse_call_arguments();
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& op = next();
    const int line = op.line;
    if (op.text == ".") {
      const Token& attribute = next();
      if (attribute.type == TokenType::kName)
        return std::make_unique<AttributeExpr>(line, std::move(node), attribute.text);
      if (attribute.type == TokenType::kInteger)
        return std::make_unique<ItemExpr>(
            line, std::move(node), std::make_unique<LiteralExpr>(line, Value(attribute.integer)));
      throw_syntax_error(line, "expected an attribute name after '.', got ", describe(attribute));
    }
    // '[': an index, a slice, or a tuple of indexes.
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) {
        if (is_op(",")) throw_syntax_error(line, "unsupported: tuple subscripts");
        expect_op("]");
        return std::make_unique<ItemExpr>(line, std::move(node), std::move(start));
      }
    }
    next();  // ':'
    auto slice = std::make_unique<SliceExpr>(line, std::move(node));
    slice->start = std::move(start);
    if (!is_op("]") && !is_op(":")) slice->stop = parse_expression(true);
    if (skip_op(":") && !is_op("]")) slice->step = parse_expression(true);
    expect_op("]");
    return slice;
  }

  Arguments parse_call_arguments() {
    Arguments args;
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**"))
        throw_syntax_error(peek().line, "unsupported: *args / **kwargs in calls");
      if (peek().type == TokenType::kName && is_op("=", 1)) {
        std::string key = next().text;
        next();
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.keyword.empty())
          throw_syntax_error(peek().line, "positional argument follows keyword argument");
        args.positional.push_back(parse_expression(true));
      }
    }
    return args;
  }

  ExprPtr parse_filter_expression(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filters(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        const int line = peek().line;
        auto call = std::make_unique<CallExpr>(line, std::move(node));
        call->args = parse_call_arguments();
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  std::string parse_dotted_name(std::string_view what) {
    std::string name = expect_name(what);
    while (skip_op(".")) name.append(".").append(expect_name(what));
    return name;
  }

  // `| f(args) | g`; for filter blocks the first filter has no leading '|' (`start_inline`).
  ExprPtr parse_filters(ExprPtr node, bool start_inline) {
    while (start_inline || is_op("|")) {
      if (!start_inline) next();
      start_inline = false;
      const int line = peek().line;
      std::string name = parse_dotted_name("a filter name");
      const FilterDef* filter = find_filter(name);
      if (!filter) throw_syntax_error(line, "unsupported filter '", name, "'");
      auto expr = std::make_unique<FilterExpr>(line, std::move(node), std::move(name), filter);
      if (is_op("(")) expr->args = parse_call_arguments();
      node = std::move(expr);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;  // 'is'
    const bool negated = skip_name("not");
    std::string name = parse_dotted_name("a test name");
    const TestDef* test = find_test(name);
    if (!test) throw_syntax_error(line, "unsupported test '", name, "'");
    auto expr = std::make_unique<TestExpr>(line, std::move(node), std::move(name), test, negated);
    const Token& token = peek();
    if (is_op("(")) {
      expr->args = parse_call_arguments();
    } else if ((token.type == TokenType::kName || token.type == TokenType::kString ||
                token.type == TokenType::kInteger || token.type == TokenType::kFloat ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) throw_syntax_error(token.line, "cannot chain multiple tests with 'is'");
      // `x is divisibleby 3`: one argument without parentheses.
      expr->args.positional.push_back(parse_postfix(parse_primary()));
    }
    return expr;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int expression_depth_ = 0;
  int block_depth_ = 0;
};

}  // namespace

Body parse(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).parse_template();
}

}  // namespace dllm::jinja
