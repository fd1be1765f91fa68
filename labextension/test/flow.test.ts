// The title of the dialog that says why a ▶ Run could not be planned.

import { planFailureTitle } from '../src/flow';
import { errorFromBody } from '../src/request';

function refusal(code: string): Error {
  return errorFromBody(
    409,
    'Conflict',
    JSON.stringify({ message: 'refused: ...', reason: 'Conflict', code })
  );
}

describe('planFailureTitle', () => {
  it('names a host that cannot contain runs, not the user', () => {
    expect(planFailureTitle(refusal('containment_unavailable'))).toBe(
      'This host cannot contain the snippet'
    );
    expect(planFailureTitle(refusal('network_unavailable'))).toBe(
      'This host cannot give the snippet a contained network'
    );
  });

  it('keeps the plain title for any other failure', () => {
    expect(planFailureTitle(refusal('invalid_request'))).toBe(
      'The sandbox could not plan this'
    );
    expect(planFailureTitle(new TypeError('Failed to fetch'))).toBe(
      'The sandbox could not plan this'
    );
  });
});
