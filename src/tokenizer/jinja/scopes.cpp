#include "tokenizer/jinja/scopes.h"

#include <functional>
#include <unordered_set>

namespace dllm::jinja {

namespace {

// What one frame mentions (jinja2's Symbols.refs) and which names start out undefined in it.
struct Frame {
  const Frame* parent = nullptr;
  std::unordered_set<std::string> mentioned;
  FrameLocals first_assigned;  // candidates, in order

  bool mentioned_outside(const std::string& name) const {
    for (const Frame* f = parent; f; f = f->parent)
      if (f->mentioned.count(name)) return true;
    return false;
  }
};

class ScopeAnalyzer {
 public:
  FrameLocals analyze(Body& body, const Frame* parent, const std::vector<std::string>& parameters) {
    Frame frame;
    frame.parent = parent;
    for (const std::string& name : parameters) frame.mentioned.insert(name);
    std::vector<std::function<void(const Frame&)>> nested;
    visit_body(body, frame, false, nested);
    FrameLocals undefined;
    for (const std::string& name : frame.first_assigned)
      if (!frame.mentioned_outside(name)) undefined.push_back(name);
    // Inner frames are analysed once this frame's mentions are complete, as jinja2 does.
    for (auto& analyze_nested : nested) analyze_nested(frame);
    return undefined;
  }

 private:
  using Nested = std::vector<std::function<void(const Frame&)>>;

  static void load(Frame& frame, const std::string& name) { frame.mentioned.insert(name); }

  static void store(Frame& frame, const std::string& name, bool in_branch) {
    // Names first assigned inside an `if` are looked up outside when unset (branch_update).
    if (frame.mentioned.insert(name).second && !in_branch) frame.first_assigned.push_back(name);
  }

  static void store_target(Frame& frame, const AssignTarget& target, bool in_branch) {
    if (!target.namespace_attribute.empty()) {
      load(frame, target.names[0]);  // `set ns.x = ...` reads ns
      return;
    }
    for (const std::string& name : target.names) store(frame, name, in_branch);
  }

  static std::vector<std::string> target_names(const AssignTarget& target) {
    return target.namespace_attribute.empty() ? target.names : std::vector<std::string>{};
  }

  void visit_arguments(const Arguments& args, Frame& frame) {
    for (const ExprPtr& arg : args.positional) visit_expr(arg.get(), frame);
    for (const auto& [key, arg] : args.keyword) visit_expr(arg.get(), frame);
  }

  void visit_expr(const Expr* expr, Frame& frame) {
    if (!expr) return;
    switch (expr->kind) {
      case Expr::Kind::kLiteral:
        return;
      case Expr::Kind::kName:
        return load(frame, static_cast<const NameExpr*>(expr)->name);
      case Expr::Kind::kList:
        for (const ExprPtr& item : static_cast<const ListExpr*>(expr)->items)
          visit_expr(item.get(), frame);
        return;
      case Expr::Kind::kDict:
        for (const auto& [key, value] : static_cast<const DictExpr*>(expr)->items) {
          visit_expr(key.get(), frame);
          visit_expr(value.get(), frame);
        }
        return;
      case Expr::Kind::kAttribute:
        return visit_expr(static_cast<const AttributeExpr*>(expr)->object.get(), frame);
      case Expr::Kind::kItem: {
        const auto* e = static_cast<const ItemExpr*>(expr);
        visit_expr(e->object.get(), frame);
        return visit_expr(e->index.get(), frame);
      }
      case Expr::Kind::kSlice: {
        const auto* e = static_cast<const SliceExpr*>(expr);
        for (const Expr* part : {e->object.get(), e->start.get(), e->stop.get(), e->step.get()})
          visit_expr(part, frame);
        return;
      }
      case Expr::Kind::kCall: {
        const auto* e = static_cast<const CallExpr*>(expr);
        visit_expr(e->callee.get(), frame);
        return visit_arguments(e->args, frame);
      }
      case Expr::Kind::kFilter: {
        const auto* e = static_cast<const FilterExpr*>(expr);
        visit_expr(e->input.get(), frame);
        return visit_arguments(e->args, frame);
      }
      case Expr::Kind::kTest: {
        const auto* e = static_cast<const TestExpr*>(expr);
        visit_expr(e->input.get(), frame);
        return visit_arguments(e->args, frame);
      }
      case Expr::Kind::kUnary:
        return visit_expr(static_cast<const UnaryExpr*>(expr)->operand.get(), frame);
      case Expr::Kind::kBinary: {
        const auto* e = static_cast<const BinaryExpr*>(expr);
        visit_expr(e->lhs.get(), frame);
        return visit_expr(e->rhs.get(), frame);
      }
      case Expr::Kind::kCompare: {
        const auto* e = static_cast<const CompareExpr*>(expr);
        visit_expr(e->first.get(), frame);
        for (const auto& [op, operand] : e->rest) visit_expr(operand.get(), frame);
        return;
      }
      case Expr::Kind::kConditional: {
        const auto* e = static_cast<const ConditionalExpr*>(expr);
        visit_expr(e->then_value.get(), frame);
        visit_expr(e->condition.get(), frame);
        return visit_expr(e->else_value.get(), frame);
      }
    }
  }

  void visit_body(Body& body, Frame& frame, bool in_branch, Nested& nested) {
    for (StmtPtr& stmt : body) visit_stmt(*stmt, frame, in_branch, nested);
  }

  void visit_stmt(Stmt& stmt, Frame& frame, bool in_branch, Nested& nested) {
    switch (stmt.kind) {
      case Stmt::Kind::kText:
      case Stmt::Kind::kBreak:
      case Stmt::Kind::kContinue:
        return;
      case Stmt::Kind::kOutput:
        return visit_expr(static_cast<OutputStmt&>(stmt).expr.get(), frame);
      case Stmt::Kind::kIf: {
        auto& node = static_cast<IfStmt&>(stmt);
        visit_expr(node.branches.front().first.get(), frame);
        for (size_t i = 0; i < node.branches.size(); ++i) {
          if (i)
            visit_expr(node.branches[i].first.get(), frame);  // elif tests live in a branch too
          visit_body(node.branches[i].second, frame, true, nested);
        }
        return visit_body(node.else_body, frame, true, nested);
      }
      case Stmt::Kind::kSet: {
        auto& node = static_cast<SetStmt&>(stmt);
        visit_expr(node.value.get(), frame);
        return store_target(frame, node.target, in_branch);
      }
      case Stmt::Kind::kSetBlock: {
        auto& node = static_cast<SetBlockStmt&>(stmt);
        store_target(frame, node.target, in_branch);
        nested.push_back([this, &node](const Frame& parent) {
          node.body_undefined = analyze(node.body, &parent, {});
        });
        return;
      }
      case Stmt::Kind::kMacro: {
        auto& node = static_cast<MacroStmt&>(stmt);
        store(frame, node.name, in_branch);
        nested.push_back([this, &node](const Frame& parent) {
          std::vector<std::string> parameters;
          for (const auto& [name, default_value] : node.parameters) parameters.push_back(name);
          node.body_undefined = analyze_macro(node, &parent, parameters);
        });
        return;
      }
      case Stmt::Kind::kFilterBlock: {
        auto& node = static_cast<FilterBlockStmt&>(stmt);
        visit_expr(node.filter.get(), frame);
        nested.push_back([this, &node](const Frame& parent) {
          node.body_undefined = analyze(node.body, &parent, {});
        });
        return;
      }
      case Stmt::Kind::kWith: {
        auto& node = static_cast<WithStmt&>(stmt);
        std::vector<std::string> targets;
        for (auto& [target, value] : node.assignments) {
          visit_expr(value.get(), frame);
          for (const std::string& name : target_names(target)) targets.push_back(name);
        }
        nested.push_back([this, &node, targets](const Frame& parent) {
          node.body_undefined = analyze(node.body, &parent, targets);
        });
        return;
      }
      case Stmt::Kind::kFor: {
        auto& node = static_cast<ForStmt&>(stmt);
        visit_expr(node.iterable.get(), frame);
        nested.push_back([this, &node](const Frame& parent) {
          std::vector<std::string> parameters = target_names(node.target);
          parameters.push_back("loop");
          node.body_undefined = analyze(node.body, &parent, parameters);
          node.else_undefined = analyze(node.else_body, &parent, {});
        });
        return;
      }
    }
  }

  // A macro's defaults are read inside the macro's frame, before its body.
  FrameLocals analyze_macro(MacroStmt& macro, const Frame* parent,
                            const std::vector<std::string>& parameters) {
    Frame seed;
    for (const auto& [name, default_value] : macro.parameters)
      visit_expr(default_value.get(), seed);
    std::vector<std::string> seeded = parameters;
    seeded.insert(seeded.end(), seed.mentioned.begin(), seed.mentioned.end());
    return analyze(macro.body, parent, seeded);
  }
};

}  // namespace

FrameLocals analyze_scopes(Body& root) {
  return ScopeAnalyzer().analyze(root, nullptr, {});
}

}  // namespace dllm::jinja
