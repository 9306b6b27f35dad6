// The anywidget model each view gets, typed with the synced traits and the custom messages of
// protocol.d.ts (which nbstream/protocol.py writes): `tsc` checks every `model.get`,
// `model.set`, `model.on` and `model.send` of the front end against the kernel's types, so a
// misspelled trait or a value of the wrong type fails `npm run typecheck`.

import type { AnyModel } from "@anywidget/types";
import type {
  BranchToAlternative,
  BranchToToken,
  BranchTraits,
  ChatWidgetOwnTraits,
  ChatWidgetRequest,
  ChatWidgetTraits,
  CompareColumnOwnTraits,
  CompareHeaderRequest,
  CompareHeaderTraits,
  RunWidgetTraits,
  ShowBranchRequest,
  StreamWidgetRequest,
  StreamWidgetTraits,
  ViewRequest,
} from "./protocol";

/** An anywidget model with synced traits `Traits` whose views send the kernel `Request`s. */
export type Model<Traits extends object, Request> = Omit<AnyModel<Traits>, "send"> & {
  send(content: Request, callbacks?: unknown, buffers?: ArrayBuffer[] | ArrayBufferView[]): void;
};

/**
 * A StreamWidget's model. A compare column's (`_Column`) has `in_run_all` too; a plain
 * StreamWidget's has not, which the view reads as false.
 */
export type StreamModel = Model<StreamWidgetTraits & Partial<CompareColumnOwnTraits>, StreamWidgetRequest>;

/** A ChatWidget's model. */
export type ChatModel = Model<ChatWidgetTraits, ChatWidgetRequest>;

/** The model of a CompareWidget's header (`_Header`). */
export type CompareHeaderModel = Model<CompareHeaderTraits, CompareHeaderRequest>;

/** What every view of a StreamWidget or ChatWidget sends, branches included. */
export type RunViewRequest = ViewRequest | BranchToToken | BranchToAlternative | ShowBranchRequest;

/**
 * The model as the parts both the StreamWidget and the ChatWidget views share see it
 * (settings panel, token views, sampling panel, branches): the traits of `RunWidget` and
 * the branch traits, and the ChatWidget's system prompt where there is one.
 */
export type RunModel = Model<RunWidgetTraits & BranchTraits & Partial<Pick<ChatWidgetOwnTraits, "system">>, RunViewRequest>;
