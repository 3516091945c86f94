"""POST /v1/responses (the Responses API adapter of the request pipeline), GET and DELETE
/v1/responses/{id} (the store).

parse: body → validated request (gateway.responses.requests) → the model, and the stored
conversation `previous_response_id` continues, with its images (read here, on the event loop that
owns the store); plan: chat template over instructions + history + input → one lane submission
(with images: planned in a worker thread, gateway.features.chat_prompt), framed natively for a
plain stream or marked per channel when items depend on the text (gateway.responses.output).
"""
from __future__ import annotations

import dataclasses

import orjson
from sanic.response import HTTPResponse

from gateway.features.chat_prompt import active_tools, chat_prompt, max_tokens_for
from gateway.http.body import parse_json_object
from gateway.http.errors import APIError, safe_repr
from gateway.responses.events import ResponseEvents
from gateway.responses.output import ResponsesOutput
from gateway.responses.requests import ResponsesRequest, parse_responses
from gateway.serve.generation import Submission
from gateway.serve.handler import Adapter, Job, Parsed, route_handler
from gateway.serve.lanes import CONTENT, REASONING, Framing, generation_params
from gateway.serve.output import CONTENT_MARK, REASONING_MARK
from gateway.vision.request import check_images_served


def _not_found(response_id: str, param: str | None = None) -> APIError:
    what = "Previous response" if param else "Response"
    return APIError(404, f"{what} with id {safe_repr(response_id)} not found.", param=param,
                    code="previous_response_not_found" if param else "response_not_found")


@dataclasses.dataclass(frozen=True)
class _Request:
    parsed: ResponsesRequest
    history: tuple[dict, ...]  # the stored conversation previous_response_id continues
    history_images: tuple      # its images (gateway.vision.parts.RequestImage), their markers in `history`

    @property
    def images(self) -> tuple:
        return self.history_images + self.parsed.images


class _Responses(Adapter):
    route = "responses"

    async def parse(self, request, state) -> Parsed:
        config = state.config
        body = parse_json_object(request.body, request.headers.get("content-type"), config.max_json_depth)
        parsed = parse_responses(body, lenient=config.lenient)
        served = state.text_model(parsed.sampling.model)
        history, history_images = (), ()
        if parsed.previous_response_id is not None:
            stored = state.responses.get(parsed.previous_response_id)
            if stored is None:
                raise _not_found(parsed.previous_response_id, "previous_response_id")
            history, history_images = stored.messages, stored.images
        fields = _Request(parsed, history, history_images)
        check_images_served(served, fields.images, "input")
        return Parsed(served.name, parsed.sampling.stream, fields, parsed.ignored_fields,
                      state.lora_for(parsed.sampling.model), plan_off_loop=bool(fields.images))

    def plan(self, state, p: Parsed) -> Job:
        parsed, served = p.fields.parsed, state.models[p.model]
        conversation = p.fields.history + parsed.messages
        system = [{"role": "system", "content": parsed.instructions}] if parsed.instructions else []
        tools, grammar = active_tools(served, parsed.tools)
        sampling = parsed.sampling if tools is None else dataclasses.replace(parsed.sampling, grammar=grammar)
        ids, markers, images = chat_prompt(served, system + list(conversation), parsed.template_kwargs, tools, parsed.think,
                                           "reasoning.effort", images=p.fields.images, param="input")
        max_tokens = max_tokens_for(sampling.max_tokens, len(ids), served.n_ctx, "input",
                                    requested_param="max_output_tokens")
        framed = tools is not None or markers is not None  # items depend on the text
        events = ResponseEvents(served.name, parsed.echo, parsed.previous_response_id, parsed.store)
        out = ResponsesOutput(state.config.retry_after_s, events, stream=sampling.stream, framed=framed,
                              tool_format=None if tools is None else tools.fmt,
                              store=state.responses if parsed.store else None, conversation=conversation,
                              images=p.fields.images)
        framings = []
        if sampling.stream:
            framings = [Framing(0, CONTENT, *CONTENT_MARK), Framing(0, REASONING, *REASONING_MARK)] \
                if framed else [out.text_framing()]
        params = generation_params(sampling, max_tokens, markers, images=images)
        return Job([Submission(ids, params, 1, framings, 0, keep_text=sampling.stream and not framed)], out)


create = route_handler("create_response", _Responses())


def _json(obj: dict, status: int = 200) -> HTTPResponse:
    return HTTPResponse(orjson.dumps(obj), status=status, content_type="application/json")


async def retrieve(request, response_id: str):
    stored = request.app.ctx.state.responses.get(response_id)
    if stored is None:
        raise _not_found(response_id)
    return _json(stored.body)


async def delete(request, response_id: str):
    if not request.app.ctx.state.responses.delete(response_id):
        raise _not_found(response_id)
    return _json({"id": response_id, "object": "response.deleted", "deleted": True})
