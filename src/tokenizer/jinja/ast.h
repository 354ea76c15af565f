// Syntax tree of a parsed template. Every node remembers its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace dllm::jinja {

struct FilterDef;
struct TestDef;

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttribute,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kCompare,
    kConditional
  };
  Expr(Kind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  Kind kind;
  int line;
};
using ExprPtr = std::unique_ptr<Expr>;

// f(a, b, key=c); *args / **kwargs are not supported.
struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(int l, Value v) : Expr(Kind::kLiteral, l), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(int l, std::string n) : Expr(Kind::kName, l), name(std::move(n)) {}
  std::string name;
};

struct ListExpr : Expr {  // [a, b] or (a, b)
  ListExpr(int l, bool tuple) : Expr(Kind::kList, l), is_tuple(tuple) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};

struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(Kind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct AttributeExpr : Expr {  // obj.name
  AttributeExpr(int l, ExprPtr o, std::string n)
      : Expr(Kind::kAttribute, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct ItemExpr : Expr {  // obj[index]
  ItemExpr(int l, ExprPtr o, ExprPtr i)
      : Expr(Kind::kItem, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};

struct SliceExpr : Expr {  // obj[start:stop:step], each part optional
  SliceExpr(int l, ExprPtr o) : Expr(Kind::kSlice, l), object(std::move(o)) {}
  ExprPtr object, start, stop, step;
};

struct CallExpr : Expr {
  CallExpr(int l, ExprPtr c) : Expr(Kind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};

// input | name(args). `input` is null for the filter of a filter block or block set, which
// filters the rendered body instead.
struct FilterExpr : Expr {
  FilterExpr(int l, ExprPtr in, std::string n, const FilterDef* f)
      : Expr(Kind::kFilter, l), input(std::move(in)), name(std::move(n)), filter(f) {}
  ExprPtr input;
  std::string name;
  const FilterDef* filter;
  Arguments args;
};

struct TestExpr : Expr {  // input is [not] name(args)
  TestExpr(int l, ExprPtr in, std::string n, const TestDef* t, bool neg)
      : Expr(Kind::kTest, l), input(std::move(in)), name(std::move(n)), test(t), negated(neg) {}
  ExprPtr input;
  std::string name;
  const TestDef* test;
  bool negated;
  Arguments args;
};

struct UnaryExpr : Expr {
  enum class Op { kNot, kNegate, kPlus };
  UnaryExpr(int l, Op o, ExprPtr e) : Expr(Kind::kUnary, l), op(o), operand(std::move(e)) {}
  Op op;
  ExprPtr operand;
};

struct BinaryExpr : Expr {
  enum class Op { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr };
  BinaryExpr(int l, Op o, ExprPtr a, ExprPtr b)
      : Expr(Kind::kBinary, l), op(o), lhs(std::move(a)), rhs(std::move(b)) {}
  Op op;
  ExprPtr lhs, rhs;
};

// a < b <= c: Python-style chained comparison; also `in` and `not in`.
struct CompareExpr : Expr {
  enum class Op { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
  CompareExpr(int l, ExprPtr first_operand)
      : Expr(Kind::kCompare, l), first(std::move(first_operand)) {}
  ExprPtr first;
  std::vector<std::pair<Op, ExprPtr>> rest;
};

struct ConditionalExpr : Expr {  // then_value if condition else else_value
  ConditionalExpr(int l, ExprPtr c, ExprPtr t, ExprPtr e)
      : Expr(Kind::kConditional, l),
        condition(std::move(c)),
        then_value(std::move(t)),
        else_value(std::move(e)) {}
  ExprPtr condition, then_value, else_value;  // else_value may be null
};

struct Stmt {
  enum class Kind {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kFilterBlock,
    kWith,
    kBreak,
    kContinue
  };
  Stmt(Kind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  Kind kind;
  int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(int l, std::string t) : Stmt(Kind::kText, l), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {  // {{ expr }}
  OutputStmt(int l, ExprPtr e) : Stmt(Kind::kOutput, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(int l) : Stmt(Kind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif, elif, ...
  Body else_body;
};

// Where `set`, `for` and `with` store values: a name, several names (unpacking a tuple), or
// an attribute of a namespace (`ns.count`).
struct AssignTarget {
  std::vector<std::string> names;
  bool unpack = false;
  std::string namespace_attribute;  // non-empty: names[0] is the namespace variable
};

// Names a frame (a scope of its own: loop body, macro, with, block set, ...) starts with as
// undefined rather than looking them up outside. jinja2 decides this statically: a name first
// assigned in a frame, outside any `if`, that no enclosing frame mentions. See scopes.h.
using FrameLocals = std::vector<std::string>;

struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(Kind::kFor, l) {}
  AssignTarget target;
  ExprPtr iterable;
  ExprPtr condition;  // `for x in xs if cond`, may be null
  Body body;
  Body else_body;
  FrameLocals body_undefined;
  FrameLocals else_undefined;
};

struct SetStmt : Stmt {
  SetStmt(int l, AssignTarget t, ExprPtr v)
      : Stmt(Kind::kSet, l), target(std::move(t)), value(std::move(v)) {}
  AssignTarget target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {  // {% set name | filter %}body{% endset %}
  SetBlockStmt(int l, AssignTarget t) : Stmt(Kind::kSetBlock, l), target(std::move(t)) {}
  AssignTarget target;
  ExprPtr filter;  // FilterExpr chain with a null innermost input, may be null
  Body body;
  FrameLocals body_undefined;
};

struct MacroStmt : Stmt {
  MacroStmt(int l, std::string n) : Stmt(Kind::kMacro, l), name(std::move(n)) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> parameters;  // default may be null
  Body body;
  FrameLocals body_undefined;
};

struct FilterBlockStmt : Stmt {  // {% filter upper %}body{% endfilter %}
  explicit FilterBlockStmt(int l) : Stmt(Kind::kFilterBlock, l) {}
  ExprPtr filter;
  Body body;
  FrameLocals body_undefined;
};

struct WithStmt : Stmt {
  explicit WithStmt(int l) : Stmt(Kind::kWith, l) {}
  std::vector<std::pair<AssignTarget, ExprPtr>> assignments;
  Body body;
  FrameLocals body_undefined;
};

struct LoopControlStmt : Stmt {  // break / continue (jinja2.ext.loopcontrols, enabled by HF)
  LoopControlStmt(int l, Kind k) : Stmt(k, l) {}
};

}  // namespace dllm::jinja
